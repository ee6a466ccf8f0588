//! Where a string's next `"`, `\` or raw control byte lies, from bit masks of the whole body.
//!
//! A chat body's strings are cut into short runs by `\n` and `\"` escapes (in the bench's
//! conversation with code in it, a quote or backslash every 46 bytes). Searching each run
//! with `memchr2` paid the call's setup on every run. Here one vectorised pass classifies the
//! body 64 bytes at a time into one bit mask per block, and every special byte is then a
//! `trailing_zeros` away.

// The crate's one home of unsafe code: SIMD intrinsics, each block with its SAFETY note.
#![allow(unsafe_code)]

const BLOCK: usize = 64;

/// Bit `i % 64` of word `i / 64` is set where `bytes[i]` is a `"`, a `\` or under 0x20.
pub(super) fn masks(bytes: &[u8]) -> Vec<u64> {
    let mut masks = Vec::with_capacity(bytes.len().div_ceil(BLOCK));
    let tail = bytes.chunks_exact(BLOCK).remainder();
    whole_blocks(&bytes[..bytes.len() - tail.len()], &mut masks);
    if !tail.is_empty() {
        // Padded with spaces, which are not special.
        let mut padded = [b' '; BLOCK];
        padded[..tail.len()].copy_from_slice(tail);
        whole_blocks(&padded, &mut masks);
    }
    masks
}

/// The offset of the first special byte at or after `from`, if any, in the bytes `masks`
/// describes.
#[inline(always)]
pub(super) fn next(masks: &[u64], from: usize) -> Option<usize> {
    let mut word = from / BLOCK;
    let mut pending = masks.get(word)? & (u64::MAX << (from % BLOCK));
    while pending == 0 {
        word += 1;
        pending = *masks.get(word)?;
    }
    Some(word * BLOCK + pending.trailing_zeros() as usize)
}

/// The masks of `blocks`, a whole number of 64-byte blocks.
#[cfg(target_arch = "x86_64")]
fn whole_blocks(blocks: &[u8], masks: &mut Vec<u64>) {
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { x86::avx2_blocks(blocks, masks) }
    } else {
        x86::sse2_blocks(blocks, masks)
    }
}

/// The masks of `blocks`, a whole number of 64-byte blocks.
#[cfg(not(target_arch = "x86_64"))]
fn whole_blocks(blocks: &[u8], masks: &mut Vec<u64>) {
    for block in blocks.chunks_exact(BLOCK) {
        let mask = block.iter().enumerate().fold(0, |mask, (i, &byte)| {
            mask | u64::from(byte == b'"' || byte == b'\\' || byte < 0x20) << i
        });
        masks.push(mask);
    }
}

/// The same classification with SSE2 (every x86_64 CPU) and AVX2 (most), 16 or 32 bytes at a
/// time. A byte is under 0x20 when `min(byte, 0x1f) == byte`, compared unsigned. Written as
/// one `extend` over exact chunks: with a `push` loop, LLVM vectorises across blocks and
/// takes each mask apart bit by bit (ten times the instructions).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::BLOCK;

    pub(super) fn sse2_blocks(blocks: &[u8], masks: &mut Vec<u64>) {
        masks.extend(blocks.chunks_exact(BLOCK).map(|block| {
            let (low, high) = block.split_at(32);
            let (a, b) = low.split_at(16);
            let (c, d) = high.split_at(16);
            sse2_lane(a) | sse2_lane(b) << 16 | sse2_lane(c) << 32 | sse2_lane(d) << 48
        }));
    }

    /// The mask of the first 16 bytes of `lane`.
    fn sse2_lane(lane: &[u8]) -> u64 {
        assert!(lane.len() >= 16);
        // SAFETY: SSE2 is part of the x86_64 baseline, and the unaligned load reads 16 bytes
        // of `lane`, which has them (asserted above, and known to the compiler).
        unsafe {
            let bytes = _mm_loadu_si128(lane.as_ptr().cast());
            let control = _mm_cmpeq_epi8(_mm_min_epu8(bytes, _mm_set1_epi8(0x1f)), bytes);
            let quotes = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
            let backslashes = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
            let hits = _mm_or_si128(_mm_or_si128(quotes, backslashes), control);
            u64::from(_mm_movemask_epi8(hits) as u16)
        }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2_blocks(blocks: &[u8], masks: &mut Vec<u64>) {
        masks.extend(blocks.chunks_exact(BLOCK).map(|block| {
            let (low, high) = block.split_at(32);
            avx2_lane(low) | avx2_lane(high) << 32
        }));
    }

    /// The mask of the first 32 bytes of `lane`.
    #[target_feature(enable = "avx2")]
    fn avx2_lane(lane: &[u8]) -> u64 {
        assert!(lane.len() >= 32);
        // SAFETY: the unaligned load reads 32 bytes of `lane`, which has them.
        let bytes = unsafe { _mm256_loadu_si256(lane.as_ptr().cast()) };
        let control = _mm256_cmpeq_epi8(_mm256_min_epu8(bytes, _mm256_set1_epi8(0x1f)), bytes);
        let quotes = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi8(b'"' as i8));
        let backslashes = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi8(b'\\' as i8));
        let hits = _mm256_or_si256(_mm256_or_si256(quotes, backslashes), control);
        u64::from(_mm256_movemask_epi8(hits) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(bytes: &[u8], from: usize) -> Option<usize> {
        (from..bytes.len()).find(|&i| matches!(bytes[i], b'"' | b'\\' | 0..=0x1f))
    }

    fn body() -> Vec<u8> {
        let mut body: Vec<u8> = (0..300).map(|i| b"ab\xc3\xa9 ~\x7f"[i % 7]).collect();
        for at in [
            0, 1, 15, 16, 31, 32, 63, 64, 65, 127, 128, 200, 255, 256, 299,
        ] {
            body[at] = [b'"', b'\\', b'\n', 0, 0x1f][at % 5];
        }
        body
    }

    #[test]
    fn finds_what_a_byte_by_byte_search_finds() {
        // Every position in and across blocks, near their edges, and past the last special.
        let body = body();
        for len in [0, 1, 63, 64, 65, 130, 300] {
            let bytes = &body[..len];
            let masks = masks(bytes);
            for from in 0..=len + 1 {
                assert_eq!(next(&masks, from), naive(bytes, from), "{len} {from}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sse2_and_avx2_agree() {
        let body = body();
        let mut sse2 = Vec::new();
        x86::sse2_blocks(&body[..256], &mut sse2);
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut avx2 = Vec::new();
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { x86::avx2_blocks(&body[..256], &mut avx2) };
            assert_eq!(sse2, avx2);
        }
        assert_eq!(sse2, masks(&body[..256]));
    }

    #[test]
    fn high_bytes_are_not_controls() {
        let bytes = [0x80u8, 0xff, 0x20, b'!', b'#', b'[', b']'].repeat(20);
        assert_eq!(next(&masks(&bytes), 0), None);
    }
}
