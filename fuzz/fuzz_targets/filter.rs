#![no_main]
// containerd filter expressions (List/Walk): never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = pullgate::snapshotter::filter::Filter::parse(s);
});
