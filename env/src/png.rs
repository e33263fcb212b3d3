//! A minimal PNG writer (8-bit grayscale or RGB, stored/uncompressed deflate
//! blocks) so `rulka sim render` and `rulka plot` need no image crate.
//! Files are larger than compressed PNGs, which is fine for small images.

/// CRC-32 (ISO-HDLC), as PNG chunks use.
fn crc32(parts: &[&[u8]]) -> u32 {
    let mut table = [0u32; 256];
    for (n, t) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
        }
        *t = c;
    }
    let mut c = 0xFFFF_FFFFu32;
    for p in parts {
        for &b in *p {
            c = table[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
        }
    }
    c ^ 0xFFFF_FFFF
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// Encodes `pixels` (`height` rows of `width·channels` bytes; `channels` 1 =
/// grayscale, 3 = RGB) as a PNG file.
///
/// # Panics
/// Never for consistent inputs; a `pixels` length that is not
/// `width·height·channels` yields an image padded or truncated to fit.
pub fn encode_png(width: u32, height: u32, channels: u8, pixels: &[u8]) -> Vec<u8> {
    let color_type = if channels == 3 { 2u8 } else { 0u8 };
    let ch = if channels == 3 { 3 } else { 1 };
    let stride = width as usize * ch;
    let mut raw = Vec::with_capacity((stride + 1) * height as usize);
    for r in 0..height as usize {
        raw.push(0); // filter: none
        let start = (r * stride).min(pixels.len());
        let end = ((r + 1) * stride).min(pixels.len());
        raw.extend_from_slice(&pixels[start..end]);
        raw.resize(raw.len() + stride - (end - start), 0);
    }
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    let n = blocks.len();
    for (i, b) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == n));
        let len = b.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(b);
    }
    if n == 0 {
        z.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
    }
    z.extend_from_slice(&adler32(&raw).to_be_bytes());
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, color_type, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_and_adler_match_published_check_values() {
        // The standard check input "123456789".
        assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }
}
