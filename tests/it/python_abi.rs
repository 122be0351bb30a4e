//! The Python package's ctypes mirrors (bindings/python/hostfirst/_abi.py) against the header:
//! bindings/python/tests/abi_check.py parses include/hostfirst.h and checks every function's signature, every
//! struct mirror's fields and every mirrored constant and enum (sizes and offsets: tests/test_layout.py).

use crate::common::{root, scratch};
use std::path::Path;
use std::process::Command;

fn abi_check(header: &Path) -> (i32, String) {
    let out = Command::new("python3")
        .arg(root().join("bindings/python/tests/abi_check.py"))
        .arg(header)
        .output()
        .expect("python3 runs (the Python ABI check needs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn python_mirrors_agree_with_the_header() {
    let (code, text) = abi_check(&root().join("include/hostfirst.h"));
    assert_eq!(code, 0, "bindings/python/hostfirst/_abi.py disagrees with include/hostfirst.h:\n{text}");
    assert!(text.contains("agrees with the header"), "{text}");
}

/// The check fails, naming the item, when the header and the mirrors part: an argument's type, a struct's
/// field, an enum value and a new function, each changed in a copy of the header.
#[test]
fn python_abi_check_names_each_mismatch() {
    let header = std::fs::read_to_string(root().join("include/hostfirst.h")).unwrap();
    let edits: [(&str, &str, &str); 4] = [
        (
            "hostfirst_status hostfirst_view_read(const struct hostfirst_view *view,\n",
            "uint64_t offset",
            "uint32_t offset",
        ),
        ("typedef struct hostfirst_fit_info {", "uint64_t free;", "uint32_t free;"),
        ("enum hostfirst_device_kind", "HOSTFIRST_DEVICE_CUDA = 2,", "HOSTFIRST_DEVICE_CUDA = 7,"),
        (
            "hostfirst_status hostfirst_release_cached_memory(void);",
            "(void);",
            "(void);\nhostfirst_status hostfirst_new_thing(void);",
        ),
    ];
    let expected = [
        "hostfirst_view_read argument 2: C `uint32_t`",
        "hostfirst_fit_info.free: C `uint32_t`",
        "HOSTFIRST_DEVICE_CUDA: 7 in the header, 2 in _abi.py",
        "hostfirst_new_thing: in the header, no signature",
    ];
    let dir = scratch("python_abi");
    for ((anchor, from, to), want) in edits.iter().zip(expected) {
        let at = header.find(anchor).unwrap_or_else(|| panic!("the header has no `{anchor}`"));
        let within = at + header[at..].find(from).unwrap_or_else(|| panic!("no `{from}` after `{anchor}`"));
        let edited = format!("{}{}{}", &header[..within], to, &header[within + from.len()..]);
        let path = dir.join("hostfirst.h");
        std::fs::write(&path, edited).unwrap();
        let (code, text) = abi_check(&path);
        assert_eq!(code, 1, "editing `{from}` to `{to}` was not caught:\n{text}");
        assert!(text.contains(want), "editing `{from}` to `{to}`: expected `{want}` in:\n{text}");
    }
}
