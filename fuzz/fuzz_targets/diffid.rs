#![no_main]
// Layer bytes as a hostile registry might send them (gzip, zstd or plain, cut short, corrupt),
// fed to the layer hasher in arbitrary chunks: it must never panic, and whatever it accepts must
// carry the digest of exactly the bytes it was fed.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&split, body)) = data.split_first() else { return };
    let digest = pullgate::registry::sha256_digest(body);
    let mut h = pullgate::diffid::Hasher::new(&digest, body.len() as u64);
    let chunk = (split as usize % 64) + 1;
    for c in body.chunks(chunk) {
        if h.update(c).is_err() {
            return;
        }
    }
    if let Ok(v) = h.finish() {
        assert_eq!(v.blob(), digest);
        assert!(pullgate::reference::is_digest(v.diff_id()));
    }
});
