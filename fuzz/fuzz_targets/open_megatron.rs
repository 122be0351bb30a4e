//! Opens arbitrary bytes as a Megatron indexed dataset: the first 8 bytes are the length of its `.bin` (at most
//! 1 MiB, zero-filled), the rest its `.idx` (`TensorFile::megatron_from_bytes`). When it opens, every sequence
//! span must lie inside the tokens and a padded gather of the first sequences must work. Any status is fine; a
//! panic or a crash is a bug. Seeds: tests/corpus/tokens/mega-*.bin (same layout; replayed by
//! `cargo test --test it tokens::`).
#![no_main]

use hostfirst::place::Gather;
use hostfirst::{Device, TensorFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let bin_len = u64::from_le_bytes(data[..8].try_into().unwrap()).min(1 << 20) as usize;
    let Ok(f) = TensorFile::megatron_from_bytes(data[8..].to_vec(), vec![0u8; bin_len]) else { return };
    let tokens = f.view("tokens").expect("a dataset has 'tokens'");
    let n = f.view("sequence_lengths").expect("and 'sequence_lengths'").shape()[0];
    let k = n.min(16);
    let idx: Vec<u64> = (0..k).collect();
    let (mut s, mut l) = (vec![0u64; k as usize], vec![0u64; k as usize]);
    f.sequence_spans(&idx, &mut s, &mut l).expect("spans of valid indices");
    for (a, b) in s.iter().zip(&l) {
        assert!(a + b <= tokens.shape()[0], "a sequence past the tokens");
    }
    if k > 0 && tokens.dtype().bits() % 8 == 0 {
        let mut g = Gather::new(Device::CPU, tokens.dtype(), k, 8).expect("a small gather");
        g.run_spans(&tokens, &s, &l, 0).expect("a padded gather of valid sequences");
    }
});
