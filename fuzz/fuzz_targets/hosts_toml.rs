#![no_main]
// containerd hosts.toml files: never panic; an accepted server is an http(s) base URL.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(ep) = pullgate::registry::hosts::parse(s, "registry.example.com:5000", false) {
        assert!(ep.base.starts_with("http://") || ep.base.starts_with("https://"), "{}", ep.base);
        assert!(!ep.base.ends_with('/'));
    }
});
