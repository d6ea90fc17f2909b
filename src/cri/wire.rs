//! cri::wire: the CRI front's byte-level tools. A codec that carries gRPC messages as raw bytes
//! (so any method, known or not, streams included, passes through untouched), and one edit on
//! a message in protobuf wire format: removing map entries by key, and appending one. Written by hand because prost
//! drops the fields it does not know when it re-encodes a message, and a newer kubelet's
//! fields must reach containerd; this edit keeps every other byte as it came.
use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{decode_varint, encode_varint};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// gRPC messages as opaque bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("malformed protobuf message: {0}")]
pub struct WireError(&'static str);

/// One field of an encoded message: its number, all its bytes (tag included), and the payload
/// of a length-delimited field.
struct Field<'a> {
    number: u64,
    raw: &'a [u8],
    payload: Option<&'a [u8]>,
}

fn fields(msg: &[u8]) -> Result<Vec<Field<'_>>, WireError> {
    let mut out = Vec::new();
    let mut rest = msg;
    while !rest.is_empty() {
        let start = rest;
        let tag = decode_varint(&mut rest).map_err(|_| WireError("bad tag"))?;
        let mut payload = None;
        let skip = |rest: &mut &[u8], n: usize| -> Result<(), WireError> {
            if rest.len() < n {
                return Err(WireError("field runs past the end"));
            }
            rest.advance(n);
            Ok(())
        };
        match tag & 7 {
            0 => {
                decode_varint(&mut rest).map_err(|_| WireError("bad varint"))?;
            }
            1 => skip(&mut rest, 8)?,
            2 => {
                let len = decode_varint(&mut rest).map_err(|_| WireError("bad length"))?;
                let len = usize::try_from(len).map_err(|_| WireError("bad length"))?;
                if rest.len() < len {
                    return Err(WireError("field runs past the end"));
                }
                payload = Some(&rest[..len]);
                rest.advance(len);
            }
            5 => skip(&mut rest, 4)?,
            _ => return Err(WireError("unsupported wire type")),
        }
        out.push(Field { number: tag >> 3, raw: &start[..start.len() - rest.len()], payload });
    }
    Ok(out)
}

/// The key (field 1, a string) of an encoded map entry.
fn entry_key(entry: &[u8]) -> Result<String, WireError> {
    let mut key = Vec::new();
    for f in fields(entry)? {
        if let (1, Some(p)) = (f.number, f.payload) {
            key = p.to_vec();
        }
    }
    String::from_utf8(key).map_err(|_| WireError("map key is not UTF-8"))
}

/// Removes from `msg` every entry of the map at `path` (the field numbers of the nested messages
/// leading to it, then the map's own) whose key `drop` matches; returns the message and how many
/// entries went. Every other byte, unknown fields included, is kept as it came.
pub fn strip_map_entries(msg: &[u8], path: &[u64], drop: &dyn Fn(&str) -> bool) -> Result<(Vec<u8>, usize), WireError> {
    let mut out = Vec::with_capacity(msg.len());
    let mut removed = 0;
    for f in fields(msg)? {
        match (path, f.payload) {
            ([n], Some(entry)) if f.number == *n => {
                if drop(&entry_key(entry)?) {
                    removed += 1;
                } else {
                    out.extend_from_slice(f.raw);
                }
            }
            ([n, inner_path @ ..], Some(inner)) if f.number == *n => {
                let (edited, r) = strip_map_entries(inner, inner_path, drop)?;
                removed += r;
                encode_varint((n << 3) | 2, &mut out);
                encode_varint(edited.len() as u64, &mut out);
                out.extend_from_slice(&edited);
            }
            _ => out.extend_from_slice(f.raw),
        }
    }
    Ok((out, removed))
}

/// Appends to `msg` one entry (`key`, `value`) of the map at `path` (as for
/// [`strip_map_entries`]), as a message of its own nested along `path`: protobuf parsers merge
/// repeated occurrences of a nested message, so the entry joins the map and every byte of `msg`
/// stays as it came.
pub fn append_map_entry(msg: &[u8], path: &[u64], key: &str, value: &str) -> Vec<u8> {
    let mut inner = Vec::new();
    for (n, s) in [(1u64, key), (2, value)] {
        encode_varint((n << 3) | 2, &mut inner);
        encode_varint(s.len() as u64, &mut inner);
        inner.extend_from_slice(s.as_bytes());
    }
    for n in path.iter().rev() {
        let mut outer = Vec::with_capacity(inner.len() + 12);
        encode_varint((n << 3) | 2, &mut outer);
        encode_varint(inner.len() as u64, &mut outer);
        outer.extend_from_slice(&inner);
        inner = outer;
    }
    let mut out = Vec::with_capacity(msg.len() + inner.len());
    out.extend_from_slice(msg);
    out.extend_from_slice(&inner);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1::{ContainerConfig, CreateContainerRequest, PodSandboxConfig, RunPodSandboxRequest};
    use prost::Message;
    use std::collections::HashMap;

    fn drop_pullgate(k: &str) -> bool {
        k == "containerd.io/snapshot.ref" || k.starts_with("containerd.io/snapshot/pullgate")
    }

    fn annotations() -> HashMap<String, String> {
        HashMap::from([
            ("containerd.io/snapshot.ref".to_string(), "sha256:x".to_string()),
            ("containerd.io/snapshot/pullgate.principal".to_string(), "team-a".to_string()),
            ("containerd.io/snapshot/other".to_string(), "kept".to_string()),
            ("app".to_string(), "kept".to_string()),
        ])
    }

    #[test]
    fn strips_nested_map_entries_and_keeps_the_rest() {
        let req = CreateContainerRequest {
            pod_sandbox_id: "pod1".into(),
            config: Some(ContainerConfig { annotations: annotations(), log_path: "c.log".into(), ..Default::default() }),
            sandbox_config: Some(PodSandboxConfig { annotations: annotations(), hostname: "h".into(), ..Default::default() }),
        };
        let mut bytes = req.encode_to_vec();
        // A field this kubelet's protos do not know (number 99, a string) must survive.
        let unknown = [0x9a, 0x06, 3, b'n', b'e', b'w'];
        bytes.extend_from_slice(&unknown);
        let (c, n) = strip_map_entries(&bytes, &[2, 10], &drop_pullgate).unwrap();
        let (c, m) = strip_map_entries(&c, &[3, 7], &drop_pullgate).unwrap();
        assert_eq!((n, m), (2, 2));
        assert!(c.ends_with(&unknown));
        let got = CreateContainerRequest::decode(c.as_slice()).unwrap();
        for a in [&got.config.as_ref().unwrap().annotations, &got.sandbox_config.as_ref().unwrap().annotations] {
            let mut keys: Vec<_> = a.keys().cloned().collect();
            keys.sort();
            assert_eq!(keys, ["app", "containerd.io/snapshot/other"]);
        }
        assert_eq!(got.config.unwrap().log_path, "c.log");
        assert_eq!(got.pod_sandbox_id, "pod1");
        let pod = RunPodSandboxRequest { config: Some(PodSandboxConfig { annotations: annotations(), ..Default::default() }), runtime_handler: "runc".into() };
        let (p, n) = strip_map_entries(&pod.encode_to_vec(), &[1, 7], &drop_pullgate).unwrap();
        assert_eq!(n, 2);
        assert_eq!(RunPodSandboxRequest::decode(p.as_slice()).unwrap().runtime_handler, "runc");
    }

    #[test]
    fn an_appended_map_entry_joins_the_map_and_keeps_the_rest() {
        let pod = RunPodSandboxRequest {
            config: Some(PodSandboxConfig { annotations: HashMap::from([("app".to_string(), "kept".to_string())]), hostname: "h".into(), ..Default::default() }),
            runtime_handler: "runc".into(),
        };
        let mut bytes = pod.encode_to_vec();
        let unknown = [0x9a, 0x06, 3, b'n', b'e', b'w'];
        bytes.extend_from_slice(&unknown);
        let out = append_map_entry(&bytes, &[1, 7], "containerd.io/snapshot/pullgate.sandbox", "true");
        assert!(out.starts_with(&bytes));
        let got = RunPodSandboxRequest::decode(out.as_slice()).unwrap();
        let config = got.config.unwrap();
        assert_eq!(config.annotations.get("containerd.io/snapshot/pullgate.sandbox").map(String::as_str), Some("true"));
        assert_eq!(config.annotations.get("app").map(String::as_str), Some("kept"));
        assert_eq!((config.hostname.as_str(), got.runtime_handler.as_str()), ("h", "runc"));
        // A request without a config gets one holding the entry alone.
        let bare = append_map_entry(&[], &[1, 7], "k", "v");
        assert_eq!(RunPodSandboxRequest::decode(bare.as_slice()).unwrap().config.unwrap().annotations.get("k").map(String::as_str), Some("v"));
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in [&[0x0a, 5, 1][..], &[0x0b][..], &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff][..], &[0x09, 1, 2][..]] {
            assert!(strip_map_entries(bad, &[1, 7], &drop_pullgate).is_err(), "{bad:?}");
        }
        assert_eq!(strip_map_entries(&[], &[1, 7], &drop_pullgate).unwrap(), (vec![], 0));
    }
}
