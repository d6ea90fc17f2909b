#![no_main]
// Manifests and indexes as a registry might send them: media-type sniffing, manifest and index
// parsing, platform strings. Never panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let media_type = pullgate::registry::sniff_media_type(data);
    let f = pullgate::registry::Fetched { digest: pullgate::registry::sha256_digest(data), media_type, bytes: data.to_vec() };
    if pullgate::registry::is_index(&f.media_type) {
        let _ = oci_spec::image::ImageIndex::from_reader(data);
    } else if let Ok(m) = pullgate::registry::parse_manifest(&f) {
        for l in m.layers() {
            let _ = pullgate::reference::is_digest(&l.digest().to_string());
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = pullgate::registry::parse_platform(s);
    }
});
