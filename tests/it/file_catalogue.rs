//! Every case of the malformed-file catalogue (docs/malformed-files.md) as its own test: opened from memory and
//! from a file through the C API, asserting the exact status, no panic, no handle created and no descriptor
//! leaked.
//! Rows 32-34 (lookups, view sizes, header bloat) have their own tests at the end.

use crate::common::alone;
use crate::file_support::*;
use hostfirst::ffi::*;
use hostfirst::Status;
use std::ffi::CString;

fn check(name: &str) {
    let cases = catalogue();
    let c = cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
    let panics = panics_on_this_thread();
    let (fds, hs) = (open_fds(), handles());

    let st = open_memory_and_walk(&c.bytes);
    assert_eq!(st, c.memory, "{name} from memory: got {} ({})", st.name(), last_error());
    if st != Status::Ok {
        assert!(last_error().contains("<memory>"), "{name}: message names the source: {}", last_error());
    }

    let path = tmp(&format!("{name}.safetensors"));
    std::fs::write(&path, &c.bytes).unwrap();
    let st = open_path_and_walk(&path);
    assert_eq!(st, c.file, "{name} from a file: got {} ({})", st.name(), last_error());
    if st != Status::Ok {
        assert!(last_error().contains(path.to_str().unwrap()), "{name}: message names the file: {}", last_error());
        assert_ne!(st, Status::Panic);
    }
    std::fs::remove_file(&path).unwrap();

    assert_eq!(panics_on_this_thread(), panics, "{name}: a panic occurred (even if caught)");
    assert_eq!(handles(), hs, "{name}: a handle leaked");
    assert_eq!(open_fds(), fds, "{name}: a file descriptor leaked");
}

macro_rules! cases {
    ($($f:ident => $name:literal,)*) => {
        $( #[test] fn $f() { alone(concat!(module_path!(), "::", stringify!($f)), || check($name)) } )*
        const ALL: &[&str] = &[$($name),*];
    };
}

cases! {
    row01_empty => "row01-empty",
    row01_short => "row01-short",
    row02_header_too_large => "row02-header-too-large",
    row03_length_beyond_32_bit => "row03-length-beyond-32-bit",
    row04_length_plus_8_overflows => "row04-length-plus-8-overflows",
    row05_header_past_end => "row05-header-past-end",
    row06_not_utf8 => "row06-not-utf8",
    row07_not_json => "row07-not-json",
    row08_empty_header => "row08-empty-header",
    row09_null => "row09-null",
    row09_array => "row09-array",
    row09_string => "row09-string",
    row10_unknown_dtype => "row10-unknown-dtype",
    row11_negative_dim => "row11-negative-dim",
    row11_fractional_dim => "row11-fractional-dim",
    row12_offsets_three => "row12-offsets-three",
    row12_offsets_one => "row12-offsets-one",
    row13_metadata_number => "row13-metadata-number",
    row14_tensor_named_metadata => "row14-tensor-named-metadata",
    row15_nul_padding => "row15-nul-padding",
    row16_whitespace_empty => "row16-whitespace-empty",
    row16_whitespace_tensor => "row16-whitespace-tensor",
    row17_unknown_field => "row17-unknown-field",
    row18_first_not_at_zero => "row18-first-not-at-zero",
    row18_gap => "row18-gap",
    row18_overlap => "row18-overlap",
    row18_end_before_begin => "row18-end-before-begin",
    row19_duplicate_different => "row19-duplicate-different",
    row20_duplicate_identical => "row20-duplicate-identical",
    row21_shape_product_overflow => "row21-shape-product-overflow",
    row22_bits_overflow => "row22-bits-overflow",
    row23_f4_odd_elements => "row23-f4-odd-elements",
    row24_span_mismatch => "row24-span-mismatch",
    row25_extra_bytes => "row25-extra-bytes",
    row26_short_data => "row26-short-data",
    row27_offsets_end_at_u64_max => "row27-offsets-end-at-u64-max",
    row28_i32_usize_max_rows => "row28-i32-usize-max-rows",
    row29_zero_sized => "row29-zero-sized",
    row30_scalar => "row30-scalar",
    row31_no_tensors => "row31-no-tensors",
    row35_misaligned_data => "row35-misaligned-data",
    row36_nan_inf => "row36-nan-inf",
    extra_name_with_nul => "extra-name-with-nul",
    extra_rank_33 => "extra-rank-33",
    extra_name_too_long => "extra-name-too-long",
    extra_duplicate_metadata => "extra-duplicate-metadata",
    extra_missing_dtype => "extra-missing-dtype",
    extra_not_safetensors_text => "extra-not-safetensors-text",
    extra_not_safetensors_zip => "extra-not-safetensors-zip",
    extra_not_safetensors_lfs_pointer => "extra-not-safetensors-lfs-pointer",
}

#[test]
fn every_case_has_a_test() {
    let names: Vec<&str> = catalogue().iter().map(|c| c.name).collect();
    assert_eq!(names, ALL);
}

#[test]
fn row32_tensor_not_found() {
    alone(concat!(module_path!(), "::row32_tensor_not_found"), || {
        let hs = handles();
        let bytes = image(r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#, &[7]);
        let mut f: *mut hostfirst_file = std::ptr::null_mut();
        assert_eq!(hostfirst_file_open_memory(bytes.as_ptr().cast(), bytes.len(), &mut f), Status::Ok);
        let name = CString::new("b").unwrap();
        let mut v: *mut hostfirst_view = std::ptr::null_mut();
        let mut idx = 99usize;
        assert_eq!(hostfirst_file_view(f, name.as_ptr(), &mut v), Status::NotFound);
        assert!(v.is_null());
        assert_eq!(hostfirst_file_find(f, name.as_ptr(), &mut idx), Status::NotFound);
        assert_eq!(idx, 99);
        assert!(last_error().contains("'b'"), "{}", last_error());
        assert_eq!(hostfirst_file_free(f), Status::Ok);
        assert_eq!(handles(), hs);
    });
}

#[test]
fn row33_view_sizes_match_shapes() {
    alone(concat!(module_path!(), "::row33_view_sizes_match_shapes"), || {
        // The walk asserts nbytes == shape x dtype size and copy == mapped bytes for every tensor.
        let h = r#"{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"b":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[3,6]},"c":{"dtype":"C64","shape":[1,1],"data_offsets":[6,14]}}"#;
        assert_eq!(open_memory_and_walk(&image(h, &[9; 14])), Status::Ok);
    });
}

fn many_tensors(n: usize) -> Vec<u8> {
    let mut h = String::with_capacity(n * 60);
    h.push('{');
    for i in 0..n {
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(r#""layer.{i}.w":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#, i + 1));
    }
    h.push('}');
    image(&h, &vec![1u8; n])
}

#[test]
fn row34_header_bloat_over_the_cap_is_limit_exceeded() {
    alone(concat!(module_path!(), "::row34_header_bloat_over_the_cap_is_limit_exceeded"), || {
        let bytes = many_tensors(hostfirst::file::MAX_TENSORS + 1);
        let hs = handles();
        assert_eq!(open_memory_and_walk(&bytes), Status::LimitExceeded);
        assert!(last_error().contains("262144"), "{}", last_error());
        assert_eq!(handles(), hs);
    });
}

/// A header of `n` tiny `__metadata__` entries and one tensor.
fn many_metadata(n: usize) -> Vec<u8> {
    let mut h = String::with_capacity(n * 16 + 64);
    h.push_str(r#"{"__metadata__":{"#);
    for i in 0..n {
        if i > 0 {
            h.push(',');
        }
        h.push_str(&format!(r#""{i:x}":"""#));
    }
    h.push_str(r#"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#);
    image(&h, &[7])
}

/// Metadata is capped like tensors: at the cap it opens; one entry more is METADATA_LIMIT_EXCEEDED, from memory
/// and from a file, and millions of entries are refused as fast as the cap plus one (the parse stops there).
#[test]
fn metadata_bloat_over_the_cap_is_metadata_limit_exceeded() {
    alone(concat!(module_path!(), "::metadata_bloat_over_the_cap_is_metadata_limit_exceeded"), || {
        let cap = hostfirst::file::MAX_METADATA_ENTRIES;
        assert_eq!(cap as u32, hostfirst::ffi::HOSTFIRST_MAX_METADATA_ENTRIES);
        let f = hostfirst::TensorFile::from_bytes(many_metadata(cap)).unwrap();
        assert_eq!(f.metadata_len(), cap);
        let hs = handles();
        let t = std::time::Instant::now();
        assert_eq!(open_memory_and_walk(&many_metadata(cap + 1)), Status::MetadataLimitExceeded);
        let at_cap = t.elapsed();
        assert!(last_error().contains("more than 65536 entries"), "{}", last_error());
        assert!(last_error().contains("__metadata__"), "{}", last_error());
        // Three million entries (a 40 MB header, under the 100 MB limit): refused, without the cost growing
        // with the entries (before the cap it took seconds and gigabytes).
        let bloat = many_metadata(3_000_000);
        assert!(bloat.len() > 30_000_000);
        let path = tmp("metadata-bloat.safetensors");
        std::fs::write(&path, &bloat).unwrap();
        let t = std::time::Instant::now();
        assert_eq!(open_path_and_walk(&path), Status::MetadataLimitExceeded);
        let bloated = t.elapsed();
        std::fs::remove_file(&path).unwrap();
        eprintln!("metadata over the cap (debug build): {cap}+1 entries {at_cap:?}, 3M entries {bloated:?}");
        // That the parse stops at the cap, without timing it: the same bloat with broken JSON after entry
        // cap + 2 still says METADATA_LIMIT_EXCEEDED, so nothing past the cap was read.
        let mut broken = many_metadata(3_000_000);
        let key = format!(r#","{:x}":"#, cap + 2);
        let at = broken.windows(key.len()).position(|w| w == key.as_bytes()).expect("the entry after the cap");
        broken[at + key.len() - 1] = b'!'; // `"key"!""`: not JSON
                                           // (The same break before the cap is a JSON error: the break is seen when the parser gets there.)
        let mut early = many_metadata(100);
        let key = r#","5":"#;
        let at = early.windows(key.len()).position(|w| w == key.as_bytes()).unwrap();
        early[at + key.len() - 1] = b'!';
        assert_eq!(open_memory_and_walk(&early), Status::InvalidHeaderJson, "{}", last_error());
        assert_eq!(open_memory_and_walk(&broken), Status::MetadataLimitExceeded, "{}", last_error());
        assert_eq!(handles(), hs);
    });
}

#[test]
fn row34_hundred_thousand_tensors_are_accepted_and_fast_to_look_up() {
    let bytes = many_tensors(100_000);
    let t = std::time::Instant::now();
    let f = hostfirst::TensorFile::from_bytes(bytes).unwrap();
    let open = t.elapsed();
    assert_eq!(f.len(), 100_000);
    let t = std::time::Instant::now();
    for i in (0..100_000).step_by(7) {
        assert_eq!(f.find(&format!("layer.{i}.w")), Some(i));
    }
    let lookups = t.elapsed();
    eprintln!("100k tensors (debug build): open {open:?}, 14286 lookups {lookups:?}");
    // Times are printed, never asserted (the benchmarks measure them: BENCHMARKS.md).
}

#[test]
fn non_regular_files_are_refused_without_hanging() {
    alone(concat!(module_path!(), "::non_regular_files_are_refused_without_hanging"), || {
        let fds = open_fds();
        let dir = tmp("a-directory");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(open_path_and_walk(&dir), Status::Io);
        assert!(last_error().contains("not a regular file"), "{}", last_error());
        assert_eq!(open_path_and_walk(std::path::Path::new("/dev/null")), Status::Io);
        let fifo = tmp("a-fifo");
        let c = CString::new(fifo.to_str().unwrap()).unwrap();
        let _ = std::fs::remove_file(&fifo);
        assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(open_path_and_walk(&fifo), Status::Io);
        std::fs::remove_file(&fifo).unwrap();
        assert_eq!(open_path_and_walk(&tmp("does-not-exist")), Status::Io);
        assert!(last_error().contains("does-not-exist"), "{}", last_error());
        assert_eq!(open_fds(), fds);
    });
}

extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

#[test]
fn c_string_arguments_are_validated() {
    alone(concat!(module_path!(), "::c_string_arguments_are_validated"), || {
        let mut f: *mut hostfirst_file = std::ptr::null_mut();
        assert_eq!(hostfirst_file_open(std::ptr::null(), &mut f), Status::NullArgument);
        let bad = [0xffu8, 0xfe, 0];
        assert_eq!(hostfirst_file_open(bad.as_ptr().cast(), &mut f), Status::InvalidArgument);
        let p = CString::new("x.safetensors").unwrap();
        assert_eq!(hostfirst_file_open(p.as_ptr(), std::ptr::null_mut()), Status::NullArgument);
        assert_eq!(hostfirst_file_open_memory(std::ptr::null(), 5, &mut f), Status::NullArgument);
        assert_eq!(hostfirst_file_open_memory(std::ptr::null(), 0, &mut f), Status::HeaderTooSmall);
        assert!(f.is_null());
    });
}
