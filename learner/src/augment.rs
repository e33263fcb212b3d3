//! Image augmentation of the frames an update trains on
//! (`training.augment`): random shifts as in RAD and DrQ.

use tch::{Kind, Tensor};

/// Each frame of `images` (`(N, C, H, W)`, any kind) shifted by its own
/// random offset of up to `pad` pixels each way: padded by `pad` with its
/// edge pixels repeated, then cropped back to `H × W` at an offset drawn
/// from `next` (`0..=2·pad` on each axis). The same kind and shape back.
pub fn random_shift(images: &Tensor, pad: i64, mut next: impl FnMut() -> u64) -> Tensor {
    if pad <= 0 {
        return images.shallow_clone();
    }
    let (n, h, w) = (images.size()[0], images.size()[2], images.size()[3]);
    let kind = images.kind();
    let padded = images.to_kind(Kind::Float).pad([pad, pad, pad, pad], "replicate", None);
    let span = (2 * pad + 1) as u64;
    let crops: Vec<Tensor> = (0..n)
        .map(|i| {
            let (dy, dx) = ((next() % span) as i64, (next() % span) as i64);
            padded.get(i).narrow(1, dy, h).narrow(2, dx, w)
        })
        .collect();
    Tensor::stack(&crops, 0).to_kind(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 5×5 frame of values `10·row + column`, shifted by 1: each output
    /// is the frame moved by (dy − 1, dx − 1), edges repeated — checked
    /// against a shift written out by hand for every offset drawn.
    #[test]
    fn a_shift_moves_the_frame_and_repeats_its_edge() {
        let frame: Vec<u8> = (0..25).map(|i| (10 * (i / 5) + i % 5) as u8).collect();
        let images = Tensor::from_slice(&frame).view([1, 1, 5, 5]).repeat([9, 1, 1, 1]);
        // Offsets 0..=2 on each axis, every pair once.
        let draws: Vec<u64> = (0..9u64).flat_map(|k| [k / 3, k % 3]).collect();
        let mut it = draws.iter().copied();
        let out = random_shift(&images, 1, || it.next().unwrap());
        assert_eq!(out.kind(), Kind::Uint8);
        assert_eq!(out.size(), [9, 1, 5, 5]);
        for k in 0..9i64 {
            let (dy, dx) = (k / 3 - 1, k % 3 - 1);
            let got = Vec::<u8>::try_from(out.get(k).flatten(0, -1)).unwrap();
            let want: Vec<u8> = (0..25i64)
                .map(|i| {
                    let (r, c) = ((i / 5 + dy).clamp(0, 4), (i % 5 + dx).clamp(0, 4));
                    (10 * r + c) as u8
                })
                .collect();
            assert_eq!(got, want, "offset ({dy}, {dx})");
        }
        // No shift: the frames as they were.
        let same = random_shift(&images, 0, || unreachable!());
        assert!(same.equal(&images));
    }
}
