//! Weight-only block quantization in the layout of ONNX Runtime's
//! `com.microsoft.MatMulNBits`: `Y = A · dequant(B)ᵀ (+ bias)` where `B` is a
//! `[N, K]` weight (PyTorch's `Linear.weight`, one row per output) cut along
//! `K` into blocks of `block` weights, each block with one `f32` scale.
//!
//! Codes are unsigned with the operator's implicit zero point `2^(bits−1)`
//! (no zero-point input is written): `w ≈ (code − 2^(bits−1)) · scale`, with
//! `scale = max|w| / (2^(bits−1) − 1)` per block (symmetric: code 0 is never
//! used, `0.0` is exact). 4-bit codes are packed two per byte, the lower `K`
//! index in the low nibble. The last block of a row is zero-padded when
//! `block` does not divide `K`.

/// A `[N, K]` weight stored as `bits`-bit codes and per-block scales.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockQuantized {
    /// Output features (rows of the weight).
    pub n: usize,
    /// Input features (the reduced axis).
    pub k: usize,
    /// Bits per code: 4 or 8.
    pub bits: u32,
    /// Weights per block (a power of two, ≥ 16).
    pub block: usize,
    /// Codes, `[N, k_blocks, block·bits/8]` bytes.
    pub codes: Vec<u8>,
    /// Scales, `[N, k_blocks]`.
    pub scales: Vec<f32>,
}

impl BlockQuantized {
    /// Blocks per row: `⌈K / block⌉`.
    pub fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block)
    }

    /// Bytes per block.
    pub fn blob_size(&self) -> usize {
        self.block * self.bits as usize / 8
    }

    fn zero_point(&self) -> i32 {
        1 << (self.bits - 1)
    }

    /// The code of weight `(row, col)`.
    pub fn code(&self, row: usize, col: usize) -> u8 {
        let (b, i) = (col / self.block, col % self.block);
        let base = (row * self.k_blocks() + b) * self.blob_size();
        match self.bits {
            4 => (self.codes[base + i / 2] >> (4 * (i % 2))) & 0x0F,
            _ => self.codes[base + i],
        }
    }

    /// The `[N, K]` weight the codes stand for (row-major).
    pub fn dequantize(&self) -> Vec<f32> {
        let zp = self.zero_point();
        let mut out = Vec::with_capacity(self.n * self.k);
        for row in 0..self.n {
            for col in 0..self.k {
                let s = self.scales[row * self.k_blocks() + col / self.block];
                out.push((i32::from(self.code(row, col)) - zp) as f32 * s);
            }
        }
        out
    }
}

/// Quantizes a row-major `[n, k]` weight. `bits` must be 4 or 8 and `block`
/// a power of two ≥ 16 (the operator's requirements); callers pass checked
/// values, anything else panics.
pub fn quantize(w: &[f32], n: usize, k: usize, bits: u32, block: usize) -> BlockQuantized {
    assert!(bits == 4 || bits == 8, "bits must be 4 or 8, got {bits}");
    assert!(block >= 16 && block.is_power_of_two(), "block must be a power of two >= 16");
    assert_eq!(w.len(), n * k, "weight is not [{n}, {k}]");
    let k_blocks = k.div_ceil(block);
    let blob = block * bits as usize / 8;
    let zp = 1i32 << (bits - 1);
    let qmax = (zp - 1) as f32;
    let mut codes = vec![0u8; n * k_blocks * blob];
    let mut scales = vec![0f32; n * k_blocks];
    for row in 0..n {
        for b in 0..k_blocks {
            let lo = row * k + b * block;
            let vals = &w[lo..row * k + ((b + 1) * block).min(k)];
            let amax = vals.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = if amax > 0.0 { amax / qmax } else { 1.0 };
            scales[row * k_blocks + b] = scale;
            let base = (row * k_blocks + b) * blob;
            for i in 0..block {
                let x = vals.get(i).copied().unwrap_or(0.0);
                let q = ((x / scale).round() as i32).clamp(-(zp - 1), zp - 1) + zp;
                if bits == 4 {
                    codes[base + i / 2] |= (q as u8) << (4 * (i % 2));
                } else {
                    codes[base + i] = q as u8;
                }
            }
        }
    }
    BlockQuantized { n, k, bits, block, codes, scales }
}

/// Symmetric per-row `int8` quantization of a row-major `[n, k]` weight:
/// `w[r][c] ≈ codes[r][c] · scales[r]`, `scales[r] = max|w[r]| / 127`
/// (1.0 for an all-zero row), codes in `-127..=127`. Returns the codes
/// transposed to `[k, n]` (the `B` of `MatMulInteger`) and the `n` scales.
pub fn quantize_rows_i8(w: &[f32], n: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    assert_eq!(w.len(), n * k, "weight is not [{n}, {k}]");
    let scales: Vec<f32> = (0..n)
        .map(|r| {
            let amax = w[r * k..(r + 1) * k].iter().fold(0f32, |m, x| m.max(x.abs()));
            if amax > 0.0 {
                amax / 127.0
            } else {
                1.0
            }
        })
        .collect();
    let mut codes = vec![0i8; n * k];
    for r in 0..n {
        for c in 0..k {
            codes[c * n + r] = (w[r * k + c] / scales[r]).round().clamp(-127.0, 127.0) as i8;
        }
    }
    (codes, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_rows_by_hand_and_transposed() {
        // Row 0: amax 2.54 -> scale 0.02; row 1 all zero -> scale 1, codes 0.
        let w = [2.54, -1.0, 0.062, 0.0, 0.0, 0.0];
        let (codes, scales) = quantize_rows_i8(&w, 2, 3);
        assert!((scales[0] - 0.02).abs() < 1e-9 && scales[1] == 1.0);
        // [k, n] layout: (c=0: r0, r1), (c=1: r0, r1), (c=2: r0, r1).
        assert_eq!(codes, vec![127, 0, -50, 0, 3, 0]);
    }

    #[test]
    fn int8_codes_and_scales_by_hand() {
        // One row, K = 20, block 16: blocks [0..16) and [16..20) + 12 zero pads.
        let mut w = vec![0f32; 20];
        w[0] = 1.27; // amax of block 0 -> scale 0.01, code 127 + 128
        w[1] = -0.5; // -50 + 128
        w[2] = 0.004; // rounds to 0 -> 128
        w[16] = -2.54; // amax of block 1 -> scale 0.02, code -127 + 128
        w[17] = 0.062; // 3.1 -> 3 + 128
        let q = quantize(&w, 1, 20, 8, 16);
        assert_eq!((q.k_blocks(), q.blob_size(), q.codes.len()), (2, 16, 32));
        assert!((q.scales[0] - 0.01).abs() < 1e-9 && (q.scales[1] - 0.02).abs() < 1e-9);
        assert_eq!(&q.codes[..3], &[255, 78, 128]);
        assert_eq!(&q.codes[16..18], &[1, 131]);
        assert!(q.codes[20..].iter().all(|&c| c == 128), "padding is code zero-point");
        let d = q.dequantize();
        assert_eq!(d.len(), 20);
        assert!((d[1] + 0.5).abs() < 1e-6 && d[2] == 0.0 && (d[17] - 0.06).abs() < 1e-6);
    }

    #[test]
    fn int4_packs_low_nibble_first() {
        // amax 0.7 -> scale 0.1; codes: 0.7 -> 15, -0.7 -> 1, 0.1 -> 9, 0 -> 8.
        let mut w = vec![0f32; 16];
        w[0] = 0.7;
        w[1] = -0.7;
        w[2] = 0.1;
        let q = quantize(&w, 1, 16, 4, 16);
        assert_eq!(q.codes.len(), 8);
        assert_eq!(q.codes[0], 15 | (1 << 4));
        assert_eq!(q.codes[1], 9 | (8 << 4));
        assert!(q.codes[2..].iter().all(|&c| c == 0x88));
        assert_eq!((q.code(0, 0), q.code(0, 1), q.code(0, 2), q.code(0, 3)), (15, 1, 9, 8));
    }

    #[test]
    fn error_is_at_most_half_a_step() {
        let (n, k) = (7, 100);
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        for bits in [4, 8] {
            let q = quantize(&w, n, k, bits, 32);
            for (i, (x, y)) in w.iter().zip(q.dequantize()).enumerate() {
                let s = q.scales[(i / k) * q.k_blocks() + (i % k) / 32];
                assert!((x - y).abs() <= s * 0.5 + 1e-7, "{bits} bits, weight {i}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn an_all_zero_block_stays_zero() {
        let q = quantize(&[0.0; 32], 1, 32, 4, 32);
        assert!(q.dequantize().iter().all(|&x| x == 0.0));
        assert_eq!(q.scales, vec![1.0]);
    }
}
