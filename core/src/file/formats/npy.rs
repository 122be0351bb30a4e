//! NumPy `.npy` files (format versions 1.0, 2.0 and 3.0), one tensor named `data`.
//!
//! Layout: the magic `\x93NUMPY`, major and minor version bytes, the header length (u16 LE for 1.0, u32 LE for
//! 2.0 and 3.0), then the header: a Python dict literal `{'descr': '<u2', 'fortran_order': False, 'shape': (n,), }`
//! padded with spaces and a newline (latin-1 in 1.0 and 2.0, UTF-8 in 3.0), then the array's bytes.
//!
//! The dict is parsed by the `py_literal` crate (Python's literal grammar, what NumPy's `ast.literal_eval`
//! reads), after a scan of our own that bounds its nesting and refuses arithmetic (`3-1`, `-1`): NumPy writes
//! plain non-negative integers, and Python's `literal_eval` evaluates no operators on them. The checks then
//! follow NumPy's reader and are stricter where it is lax: exactly the three keys, `shape` a tuple of
//! non-negative integers, `descr` a type string hostfirst can hand out as it is, and the file exactly
//! header + data (NumPy reads the first `n` elements of a longer file).
//!
//! Choices where the format allows more than hostfirst hands out: a Fortran-ordered array with more than one
//! dimension longer than 1 is refused (`UNSUPPORTED_LAYOUT`) rather than opened as a strided view, because
//! every whole-tensor consumer downstream (loads, puts, gathers, shard-on-read) reads a tensor as one C-order
//! block; token arrays are 1-D, where both orders are the same bytes (and accepted). Big-endian, object,
//! string, structured, datetime, complex128 and float128 arrays get `UNSUPPORTED_DTYPE` with the conversion
//! to make.

use super::{exact_cover, header, Spec};
use crate::dtype::DType;
use crate::error::{Error, Result, Status};
use crate::file::header::Header;
use crate::file::MAX_RANK;
use py_literal::Value;

/// NumPy's own cap on the header (`max_header_size`, 10,000 bytes since NumPy 1.24): `np.load` refuses larger
/// headers as unsafe to parse, and so do we (`HEADER_TOO_LARGE`).
pub const MAX_NPY_HEADER: u64 = 10_000;

/// The deepest bracket nesting a header may have (NumPy writes 2: the dict and the shape tuple).
const MAX_NESTING: usize = 4;

/// The tensor's name.
pub const TENSOR: &str = "data";

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(Status::InvalidHeader, msg.into())
}

/// Parses and validates a `.npy` file whose first bytes are `start` and whose length is `total_len`. `read`
/// fetches further bytes (absolute offset, destination) when the header is longer than `start`. `short` is
/// the status of a file shorter than it declares (`TRUNCATED` for files, `INCOMPLETE_BUFFER` for memory).
pub(crate) fn parse(
    start: &[u8],
    total_len: u64,
    short: Status,
    read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<Header> {
    if !start.starts_with(super::NPY_MAGIC) {
        return Err(invalid(format!(
            "not a .npy file: it does not begin with the NumPy magic \\x93NUMPY (it begins {})",
            hex(&start[..start.len().min(8)])
        )));
    }
    if start.len() < 8 {
        return Err(Error::new(
            Status::HeaderTooSmall,
            format!("{} bytes end inside the 8-byte .npy magic and version", start.len()),
        ));
    }
    let (major, minor) = (start[6], start[7]);
    let (len_bytes, utf8) = match (major, minor) {
        (1, 0) => (2usize, false),
        (2, 0) => (4, false),
        (3, 0) => (4, true),
        _ => {
            return Err(Error::new(
                Status::UnsupportedVersion,
                format!(".npy format version {major}.{minor}; hostfirst reads 1.0, 2.0 and 3.0 (as NumPy does)"),
            ))
        }
    };
    let pre = 8 + len_bytes;
    let Some(len_field) = start.get(8..pre) else {
        return Err(Error::new(
            Status::HeaderTooSmall,
            format!(
                "{} bytes end inside the {pre}-byte preamble of a version {major}.0 .npy file (magic, version, \
                 header length)",
                start.len()
            ),
        ));
    };
    let hlen = len_field.iter().rev().fold(0u64, |a, &b| (a << 8) | u64::from(b));
    if hlen > MAX_NPY_HEADER {
        return Err(Error::new(
            Status::HeaderTooLarge,
            format!(
                ".npy header length {hlen} exceeds {MAX_NPY_HEADER} bytes (NumPy's own max_header_size, which np.load \
                 enforces too)"
            ),
        ));
    }
    let data_start = pre as u64 + hlen;
    if data_start > total_len {
        let status = if short == Status::Truncated { Status::Truncated } else { Status::InvalidHeaderLength };
        return Err(Error::new(
            status,
            format!(".npy header length {hlen} needs {data_start} bytes but there are only {total_len}"),
        ));
    }
    let mut owned = Vec::new();
    let raw: &[u8] = match start.get(pre..data_start as usize) {
        Some(h) => h,
        None => {
            owned.resize(hlen as usize, 0);
            read(pre as u64, &mut owned)?;
            &owned
        }
    };
    let text: String = if utf8 {
        std::str::from_utf8(raw)
            .map_err(|e| Error::new(Status::InvalidHeaderUtf8, format!(".npy 3.0 header is not valid UTF-8 ({e})")))?
            .to_string()
    } else {
        raw.iter().map(|&b| b as char).collect() // latin-1
    };
    let (dtype, shape, fortran) = parse_dict(&text)?;
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(Error::new(
            Status::UnsupportedLayout,
            format!(
                "the array {shape:?} is stored in Fortran (column-major) order; hostfirst hands out C-order tensors \
                 only. Re-save it C-ordered: np.save(path, np.ascontiguousarray(a))"
            ),
        ));
    }
    let nbytes = crate::file::header::tensor_bytes(TENSOR, dtype, &shape)?;
    exact_cover(data_start, nbytes, total_len, short, "the .npy header")?;
    let descr = descr_of(&text);
    let metadata = vec![
        ("format".to_string(), "npy".to_string()),
        ("npy_version".to_string(), format!("{major}.0")),
        ("descr".to_string(), descr),
        ("fortran_order".to_string(), if fortran { "True" } else { "False" }.to_string()),
    ];
    header(data_start, nbytes, &[Spec { name: TENSOR, dtype, shape, start: 0 }], metadata)
}

/// The `descr` value as written, for the metadata (the parse already validated it).
fn descr_of(text: &str) -> String {
    match text.trim().parse::<Value>() {
        Ok(Value::Dict(items)) => items
            .into_iter()
            .find_map(|(k, v)| match (k, v) {
                (Value::String(k), Value::String(v)) if k == "descr" => Some(v),
                _ => None,
            })
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// Bounds the nesting and refuses arithmetic outside strings, before the literal parser sees the text. The
/// parser (a PEG) tries a value again for each alternative of the bracket around it (`value?` after `(value
/// ",")*`, a dict then a set), so its work grows exponentially with the nesting it sees: this scan must count
/// every bracket the parser could read outside a string, which means ending strings exactly where it does.
fn prescan(text: &str) -> Result<()> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    // Where the last `}` is: whether a `\N{` has one after it, without searching the rest of the text each time.
    let last_brace = text.rfind('}');
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if let Some(q) = quote {
            if c == '\\' {
                // Strings end where the literal parser ends them, or its nesting is not what this scan counts.
                // Its escapes all end before any quote but one: `\N{name}` runs to the next `}`, across quotes
                // and lines. The parser then refuses it ("Unicode name escapes are not supported"), after
                // parsing all that follows, so such a header is refused here, where it costs nothing.
                if text[i + 1..].starts_with("N{") && last_brace.is_some_and(|b| b > i + 2) {
                    return Err(invalid(format!(
                        "the .npy header has a \\N{{...}} (Unicode name) escape in a string, which hostfirst does \
                         not read (NumPy writes none): {}",
                        clip(text)
                    )));
                }
                chars.next(); // the escaped character: a quote there does not end the string
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(invalid(format!(
                        "the .npy header nests brackets more than {MAX_NESTING} deep; NumPy writes a dict holding a \
                         shape tuple"
                    )));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '+' | '-' => {
                return Err(invalid(
                    "the .npy header has a sign or arithmetic outside its strings (a negative dimension?); NumPy \
                     writes plain non-negative integers",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The dict: (dtype, shape, fortran_order).
fn parse_dict(text: &str) -> Result<(DType, Vec<u64>, bool)> {
    let body = text.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0c');
    prescan(body)?;
    let value = body
        .parse::<Value>()
        .map_err(|e| invalid(format!("the .npy header is not a Python literal ({e}): {}", clip(body))))?;
    let Value::Dict(items) = value else {
        return Err(invalid(format!("the .npy header is not a dict: {}", clip(body))));
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (k, v) in items {
        let Value::String(key) = k else {
            return Err(invalid(format!("the .npy header has a key that is not a string: {}", clip(body))));
        };
        let slot = match key.as_str() {
            "descr" => &mut descr,
            "fortran_order" => &mut fortran,
            "shape" => &mut shape,
            _ => {
                return Err(invalid(format!(
                    "the .npy header has the key '{}'; it must have exactly 'descr', 'fortran_order' and 'shape'",
                    key.escape_debug()
                )))
            }
        };
        if slot.is_some() {
            return Err(invalid(format!("the .npy header has the key '{key}' twice")));
        }
        *slot = Some(v);
    }
    let (Some(descr), Some(fortran), Some(shape)) = (descr, fortran, shape) else {
        return Err(invalid(format!(
            "the .npy header lacks a key: it must have exactly 'descr', 'fortran_order' and 'shape': {}",
            clip(body)
        )));
    };
    let fortran = match fortran {
        Value::Boolean(b) => b,
        other => return Err(invalid(format!("'fortran_order' is {other}, not True or False"))),
    };
    let Value::Tuple(dims) = shape else {
        return Err(invalid(format!("'shape' is {shape}, not a tuple of integers")));
    };
    if dims.len() > MAX_RANK {
        return Err(Error::new(
            Status::LimitExceeded,
            format!("the .npy array has {} dimensions; the hostfirst cap is {MAX_RANK}", dims.len()),
        ));
    }
    let mut out = Vec::with_capacity(dims.len());
    for d in &dims {
        let Value::Integer(i) = d else {
            return Err(invalid(format!("'shape' has the entry {d}, not a non-negative integer")));
        };
        out.push(u64::try_from(i).map_err(|_| {
            Error::new(Status::ValidationOverflow, format!("'shape' has the dimension {i}, which does not fit 64 bits"))
        })?);
    }
    let dtype = match descr {
        Value::String(s) => dtype_of(&s)?,
        Value::List(_) => {
            return Err(Error::new(
                Status::UnsupportedDtype,
                "the .npy array has a structured dtype (a list of fields); hostfirst hands out plain arrays: save \
                 each field as an array of its own",
            ))
        }
        other => return Err(invalid(format!("'descr' is {other}, not a dtype string"))),
    };
    Ok((dtype, out, fortran))
}

/// A NumPy type string (`'<u2'`, `'|b1'`, `'<f4'`) as a hostfirst dtype.
pub(crate) fn dtype_of(descr: &str) -> Result<DType> {
    let unsupported =
        |what: &str| Err(Error::new(Status::UnsupportedDtype, format!("the .npy array's dtype '{descr}' is {what}")));
    let (order, rest) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('=', descr),
    };
    let mut chars = rest.chars();
    let kind = chars.next().unwrap_or(' ');
    let size_text = chars.as_str();
    match kind {
        'O' => {
            return unsupported(
                "object (pickled Python objects, no fixed-size elements to view; np.load needs allow_pickle=True)",
            )
        }
        'U' | 'S' | 'a' => return unsupported("a string type: encode the text as integers first"),
        'V' => {
            return unsupported(
                "opaque bytes (void): NumPy writes this for dtypes it does not know, such as ml_dtypes' bfloat16; \
                 save such arrays with safetensors, or as their bits (a.view(np.uint16))",
            )
        }
        'M' | 'm' => return unsupported("a datetime or timedelta: save it as int64 (a.astype('<i8'))"),
        _ => {}
    }
    let size: u32 = match size_text.parse() {
        Ok(n) if !size_text.starts_with('+') => n,
        _ => return Err(invalid(format!("'descr' is '{descr}', not a NumPy type string such as '<u2'"))),
    };
    let dtype = match (kind, size) {
        ('b', 1) => DType::BOOL,
        ('i', 1) => DType::I8,
        ('u', 1) => DType::U8,
        ('i', 2) => DType::I16,
        ('u', 2) => DType::U16,
        ('i', 4) => DType::I32,
        ('u', 4) => DType::U32,
        ('i', 8) => DType::I64,
        ('u', 8) => DType::U64,
        ('f', 2) => DType::F16,
        ('f', 4) => DType::F32,
        ('f', 8) => DType::F64,
        ('c', 8) => DType::C64,
        ('c', 16) => {
            return unsupported(
                "complex128, which has no hostfirst dtype: save it as complex64 or as two float64 arrays",
            )
        }
        ('f', 10 | 12 | 16) | ('c', 20 | 24 | 32) => {
            return unsupported(
                "extended precision (float128 / complex256), which has no hostfirst dtype: save it as float64",
            )
        }
        _ => return Err(invalid(format!("'descr' is '{descr}', not a NumPy type string hostfirst knows"))),
    };
    if order == '>' && size > 1 {
        return unsupported(
            "big-endian; hostfirst hands out the file's bytes as they are, and every consumer reads little-endian: \
             convert it with a.astype(a.dtype.newbyteorder('<'))",
        );
    }
    Ok(dtype)
}

fn clip(s: &str) -> String {
    let t: String = s.chars().take(120).collect();
    if t.len() < s.len() {
        format!("{}...", t.escape_debug())
    } else {
        t.escape_debug().to_string()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(major: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let mut v = b"\x93NUMPY".to_vec();
        v.push(major);
        v.push(0);
        let pre = if major == 1 { 10 } else { 12 };
        let mut h = dict.to_string();
        while (pre + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        if major == 1 {
            v.extend_from_slice(&(h.len() as u16).to_le_bytes());
        } else {
            v.extend_from_slice(&(h.len() as u32).to_le_bytes());
        }
        v.extend_from_slice(h.as_bytes());
        v.extend_from_slice(data);
        v
    }

    fn open(b: &[u8]) -> Result<Header> {
        parse(b, b.len() as u64, Status::IncompleteBuffer, &mut |_, _| panic!("no read past the buffer here"))
    }

    #[test]
    fn versions_and_dtypes() {
        for major in 1..=3 {
            let b = npy(major, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", &[1, 0, 2, 0, 3, 0]);
            let h = open(&b).unwrap();
            assert_eq!(h.entries[0].dtype, DType::U16);
            assert_eq!(&h.entries[0].shape[..], &[3]);
            assert_eq!(h.data_start, b.len() as u64 - 6);
            assert_eq!(h.data_len, 6);
        }
        for (d, t) in [
            ("|b1", DType::BOOL),
            ("<i8", DType::I64),
            ("<f2", DType::F16),
            ("<c8", DType::C64),
            ("|u1", DType::U8),
            (">u1", DType::U8),
        ] {
            assert_eq!(dtype_of(d).unwrap(), t, "{d}");
        }
        for d in ["|O", "<U3", "|S2", "|V2", "<M8[ns]", "<c16", "<f16", ">f4", "[('a', '<f4')]"] {
            if d.starts_with('[') {
                continue;
            }
            assert_eq!(dtype_of(d).unwrap_err().status(), Status::UnsupportedDtype, "{d}");
        }
        for d in ["<u3", "xyz", "<b2", "", "<f+4"] {
            assert_eq!(dtype_of(d).unwrap_err().status(), Status::InvalidHeader, "{d}");
        }
    }

    #[test]
    fn hostile_headers() {
        let cases: &[(&str, Status)] = &[
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (-1,), }", Status::InvalidHeader),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (3-1,), }", Status::InvalidHeader),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': [2], }", Status::InvalidHeader),
            ("{'descr': '<u2', 'fortran_order': 0, 'shape': (2,), }", Status::InvalidHeader),
            ("{'descr': '<u2', 'shape': (2,), }", Status::InvalidHeader),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), 'x': 1}", Status::InvalidHeader),
            ("{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (2,)}", Status::InvalidHeader),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': ((((((2,),),),),),)}", Status::InvalidHeader),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (2,)", Status::InvalidHeader),
            ("[1, 2]", Status::InvalidHeader),
            ("{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (2,)}", Status::UnsupportedDtype),
            ("{'descr': '>u2', 'fortran_order': False, 'shape': (2,)}", Status::UnsupportedDtype),
            ("{'descr': '<u2', 'fortran_order': True, 'shape': (2, 2)}", Status::UnsupportedLayout),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999,)}", Status::ValidationOverflow),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", Status::ValidationOverflow),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (3,)}", Status::IncompleteBuffer),
            ("{'descr': '<u2', 'fortran_order': False, 'shape': (1,)}", Status::IncompleteBuffer),
        ];
        for (dict, st) in cases {
            let b = npy(1, dict, &[0, 0, 0, 0]);
            assert_eq!(open(&b).unwrap_err().status(), *st, "{dict}");
        }
        // Fortran order of a vector (or of one long dimension) is the same bytes: accepted.
        let b = npy(1, "{'descr': '<u2', 'fortran_order': True, 'shape': (1, 2)}", &[0, 0, 0, 0]);
        assert!(open(&b).is_ok());
        // Versions and truncated preambles.
        let good = npy(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,)}", &[0, 0, 0, 0]);
        let mut v4 = good.clone();
        v4[6] = 4;
        assert_eq!(open(&v4).unwrap_err().status(), Status::UnsupportedVersion);
        let mut v11 = good.clone();
        v11[7] = 1;
        assert_eq!(open(&v11).unwrap_err().status(), Status::UnsupportedVersion);
        let data_start = good.len() - 4;
        for cut in 6..good.len() {
            let st = open(&good[..cut]).unwrap_err().status();
            let want = if cut < 10 {
                Status::HeaderTooSmall
            } else if cut < data_start {
                Status::InvalidHeaderLength
            } else {
                Status::IncompleteBuffer
            };
            assert_eq!(st, want, "cut at {cut}");
        }
        let mut big = good.clone();
        big[8] = 0xff;
        big[9] = 0xff;
        assert_eq!(open(&big).unwrap_err().status(), Status::HeaderTooLarge);
    }

    /// What the fuzzer found (open_npy, 2026-11-29): the literal parser reads `\N{...}` up to the next `}`, past a
    /// quote, where the scan had ended the string; 130 brackets the scan took for a string's text were nesting to
    /// the parser, which ran for more than libFuzzer's 30 s under ASan. Here 40 brackets.
    #[test]
    fn a_name_escape_hides_no_nesting_from_the_scan() {
        let dict = format!("{{'a\\N{{'}}': {}{}}}", "[".repeat(40), "]".repeat(40));
        assert!(prescan(&dict).is_err(), "the scan let through {dict}");
        let e = open(&npy(1, &dict, &[])).unwrap_err();
        assert_eq!(e.status(), Status::InvalidHeader);
        assert!(e.to_string().contains(r"\N{...}"), "{e}");
        // Every other escape ends where the scan ends it, and so does a `\N{` without a `}` after it (the parser
        // reads it as an unknown escape): the scan lets these through to the parser, which judges them.
        for s in [r"'\x41'", r"'\''", r"'\N'", r"'\N{'", r"'\u0041'", "'a\\\n'"] {
            assert!(prescan(s).is_ok(), "{s}");
        }
        assert!(prescan(r"'\N{A}'").is_err());
        // The descr of a real file never holds one; with it, the header is refused however it is nested.
        let b = npy(1, r"{'descr': '<u\N{DIGIT TWO}', 'fortran_order': False, 'shape': (1,)}", &[0, 0]);
        assert_eq!(open(&b).unwrap_err().status(), Status::InvalidHeader);
    }

    /// Pieces of a string's text where the scan and the parser could disagree on where the string ends.
    const IN_STRING: &[&str] =
        &["'", "\"", "\\", r"\N{", "N{", "}", "{", "a", "\n", r"\'", "\\\n", "b'", "[", "(", r"\x7"];
    /// Pieces of what may follow the string.
    const AFTER: &[&str] = &["'", "\"", "}", "{", "[", "(", ")", "]", ",", ":", "1", " ", "'a'", "((((", "]]", "))"];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]
        /// Whatever the scan lets through, the literal parser reads within a fixed budget of rule calls: the
        /// scan counts every bracket the parser could nest. Each text is a list holding a string made of pieces
        /// where the two could disagree on where it ends, more pieces, and a nesting of lists. (pest's call
        /// limit is set for the whole process; a million calls is far above what the headers of the other tests
        /// need, and a nesting the scan missed needs more.)
        #[test]
        fn what_the_scan_passes_the_parser_reads_in_bounded_work(
            quote in proptest::sample::select(vec!["'", "\"", "b'"]),
            body in proptest::collection::vec(proptest::sample::select(IN_STRING), 0..8),
            after in proptest::collection::vec(proptest::sample::select(AFTER), 0..3),
            nest in 0usize..40,
        ) {
            let close = if quote == "b'" { "'" } else { quote };
            let text = format!(
                "[{quote}{}{close}, {}{}{}]",
                body.concat(),
                after.concat(),
                "[".repeat(nest),
                "]".repeat(nest)
            );
            if prescan(&text).is_ok() {
                pest::set_call_limit(std::num::NonZeroUsize::new(1_000_000));
                let r = text.parse::<Value>();
                proptest::prop_assert!(
                    !matches!(&r, Err(e) if e.to_string().contains("call limit")),
                    "the parser needed over 1,000,000 calls for a text the scan passed: {:?}", text
                );
            }
        }
    }
}
