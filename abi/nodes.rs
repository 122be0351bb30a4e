// The version nodes of abi/hostfirst.map and the node of each exported function. Shared, as source, by build.rs
// (which binds every export to its node with a `.symver` directive) and tests/it/abi.rs (`#[path]` modules):
// one reading of the map for both, with no dependency.
//
// The map's rules (checked by `check`, so a build with a map that breaks them fails with the fix in the message):
//   - stable nodes come first, in order, each after the first naming the one before it as its parent:
//         HOSTFIRST_1.0 { global: hostfirst_a; hostfirst_b; local: *; };
//         HOSTFIRST_1.1 { global: hostfirst_*; } HOSTFIRST_1.0;
//   - the last stable node is the open one, named after the crate's MAJOR.MINOR, with the one pattern
//     `hostfirst_*`: every function no other node claims lands there, so a new function needs no edit here;
//   - every earlier (released) node lists its functions by name: it is frozen, and a new function cannot land
//     in it (scripts/abi-check.sh also refuses a function absent from the baseline in any node but the open one
//     and the experimental one);
//   - at most one experimental node, HOSTFIRST_EXPERIMENTAL_MAJOR.MINOR (renamed every minor, so a program
//     using an experimental function runs only with the minor it was built against), with name patterns (`*`
//     wildcards) that also put the matching types, constants and functions of include/hostfirst.h behind
//     `#ifdef HOSTFIRST_EXPERIMENTAL` (tests/it/header.rs).

/// One node of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// The names and patterns after `global:`.
    pub global: Vec<String>,
    /// The node this one inherits (`} PARENT;`).
    pub parent: Option<String>,
}

/// The nodes of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    /// Stable nodes in order; the last is the open one.
    pub stable: Vec<Node>,
    pub experimental: Option<Node>,
}

/// The experimental node's name prefix.
pub const EXPERIMENTAL_PREFIX: &str = "HOSTFIRST_EXPERIMENTAL_";

/// Parses a version script of the form above (`/* */` comments allowed).
pub fn parse(text: &str) -> Result<Nodes, String> {
    let mut code = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        code.push_str(&rest[..i]);
        let end = rest[i..].find("*/").ok_or("unterminated /* comment")?;
        rest = &rest[i + end + 2..];
    }
    code.push_str(rest);
    let mut nodes = Nodes { stable: Vec::new(), experimental: None };
    let mut rest = code.as_str();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let open = rest.find('{').ok_or_else(|| format!("expected `NAME {{` at {:?}", first_line(rest)))?;
        let name = rest[..open].trim().to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            return Err(format!("bad node name {name:?}"));
        }
        let close = open + rest[open..].find('}').ok_or_else(|| format!("node {name}: no closing brace"))?;
        let body = &rest[open + 1..close];
        let after = &rest[close + 1..];
        let semi = after.find(';').ok_or_else(|| format!("node {name}: no `;` after its closing brace"))?;
        let parent = after[..semi].trim();
        let parent = (!parent.is_empty()).then(|| parent.to_string());
        rest = &after[semi + 1..];
        let mut global = Vec::new();
        let mut section = "";
        for item in body.split(';') {
            let mut item = item.trim();
            for label in ["global:", "local:"] {
                if let Some(r) = item.strip_prefix(label) {
                    section = label;
                    item = r.trim();
                }
            }
            if item.is_empty() {
                continue;
            }
            match section {
                "global:" => global.push(item.to_string()),
                "local:" if item == "*" => {}
                _ => return Err(format!("node {name}: `{item}` outside `global:` (only `local: *;` is allowed)")),
            }
        }
        let node = Node { name, global, parent };
        if node.name.starts_with(EXPERIMENTAL_PREFIX) {
            if nodes.experimental.is_some() {
                return Err("more than one experimental node".into());
            }
            nodes.experimental = Some(node);
        } else {
            nodes.stable.push(node);
        }
    }
    Ok(nodes)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Whether `name` matches `pattern` (`*` matches any run of characters).
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut at = first.len();
    let end = name.len() - last.len();
    for mid in &parts[1..parts.len() - 1] {
        match name[at..end].find(mid) {
            Some(i) => at += i + mid.len(),
            None => return false,
        }
    }
    true
}

/// The open node's name for a crate version.
pub fn open_node_name(major: u64, minor: u64) -> String {
    format!("HOSTFIRST_{major}.{minor}")
}

/// Checks the map's rules for the crate version `major.minor`.
pub fn check(nodes: &Nodes, major: u64, minor: u64) -> Result<(), String> {
    let want = open_node_name(major, minor);
    let Some(open) = nodes.stable.last() else {
        return Err(format!("no stable node: define `{want} {{ global: hostfirst_*; local: *; }};`"));
    };
    if open.name != want {
        return Err(format!(
            "the last stable node is {}, but the crate version is {major}.{minor}: freeze {} (list its functions by \
             name instead of `hostfirst_*`) and append `{want} {{ global: hostfirst_*; }} {};`",
            open.name, open.name, open.name
        ));
    }
    if open.global != ["hostfirst_*"] {
        return Err(format!("the open node {want} must have exactly `global: hostfirst_*;`, not {:?}", open.global));
    }
    for (i, node) in nodes.stable.iter().enumerate() {
        if i + 1 < nodes.stable.len() {
            if let Some(p) = node.global.iter().find(|p| p.contains('*')) {
                return Err(format!("{} is released: list its functions by name, not `{p}`", node.name));
            }
        }
        let parent = if i == 0 { None } else { Some(nodes.stable[i - 1].name.clone()) };
        if node.parent != parent {
            return Err(format!("{} must inherit {:?}, not {:?}", node.name, parent, node.parent));
        }
    }
    if let Some(x) = &nodes.experimental {
        let want = format!("{EXPERIMENTAL_PREFIX}{major}.{minor}");
        if x.name != want {
            return Err(format!("the experimental node is {}; for {major}.{minor} it is {want}", x.name));
        }
        if x.parent.is_some() {
            return Err(format!("{want} inherits no node"));
        }
    }
    Ok(())
}

/// Whether `name` (a function, type or constant name, any case) is experimental.
pub fn is_experimental(nodes: &Nodes, name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    nodes.experimental.as_ref().is_some_and(|x| x.global.iter().any(|p| glob(p, &lower)))
}

/// The node of the exported function `name`: a released node listing it, else the experimental node when one
/// of its patterns matches, else the open node.
pub fn node_of<'a>(nodes: &'a Nodes, name: &str) -> Result<&'a str, String> {
    let (open, released) = nodes.stable.split_last().ok_or("no stable node")?;
    let listed: Vec<&str> =
        released.iter().filter(|n| n.global.iter().any(|g| g == name)).map(|n| n.name.as_str()).collect();
    let experimental = is_experimental(nodes, name);
    match (listed.as_slice(), experimental) {
        ([], true) => Ok(nodes.experimental.as_ref().map(|x| x.name.as_str()).unwrap_or_default()),
        ([], false) if open.global.iter().any(|p| glob(p, name)) => Ok(&open.name),
        ([], false) => Err(format!("{name} matches no node of abi/hostfirst.map")),
        ([one], false) => Ok(one),
        ([one], true) => Err(format!("{name} is listed in the released node {one} and matches the experimental node")),
        (many, _) => Err(format!("{name} is listed in several nodes: {many:?}")),
    }
}

/// The names of the exported functions in the sources: every `hostfirst_boundary!("NAME"` (the `local` form,
/// for functions C gets only by pointer, is not exported).
pub fn exported_names(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let key = "hostfirst_boundary!(\"";
    let mut rest = source;
    while let Some(i) = rest.find(key) {
        rest = &rest[i + key.len()..];
        if let Some(end) = rest.find('"') {
            out.push(rest[..end].to_string());
        }
    }
    out
}
