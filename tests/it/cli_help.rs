//! `hostfirst --help` and `hostfirst CMD --help` are complete: every option the parser accepts is in them, and
//! every option they list is accepted (both come from one table in cli/main.c; these tests keep a
//! parser from growing an option behind the table's back).

use crate::common::*;
use std::collections::BTreeSet;

/// The commands listed by `hostfirst --help`.
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|l| l.strip_prefix("  hostfirst "))
        .map(|rest| rest.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// The options (with their value placeholder) listed under "options:" in a command's help.
fn options(help: &str) -> Vec<(String, Option<String>)> {
    let body = &help[help.find("\noptions:\n").expect("an options: section")..];
    body.lines()
        .skip(2)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?;
            if !name.starts_with("--") || name == "--help" {
                return None;
            }
            let value = w.next().filter(|v| v.chars().all(|c| c.is_ascii_uppercase() || "=:[]@".contains(c)));
            Some((name.to_string(), value.map(str::to_string)))
        })
        .collect()
}

/// Every `"--option"` string literal in the CLI's sources.
fn options_in_sources() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("cli")).unwrap() {
        let path = entry.unwrap().path();
        if !path.extension().is_some_and(|x| x == "c" || x == "h") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for piece in text.split("\"--").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_ascii_lowercase() || *c == '-').collect();
            if !name.is_empty() && piece[name.len()..].starts_with('"') {
                found.insert(format!("--{name}"));
            }
        }
    }
    found
}

#[test]
fn help_lists_every_command_and_option() {
    let top = run_ok(&cli(), &["--help"], &[]);
    let cmds = commands(&top);
    assert_eq!(cmds, ["devices", "inspect", "put", "plan", "load", "gather", "shard", "convert"], "{top}");
    let mut listed = BTreeSet::from(["--help".to_string(), "--version".to_string()]);
    for cmd in &cmds {
        let help = run_ok(&cli(), &[cmd, "--help"], &[]);
        assert!(help.starts_with(&format!("usage: hostfirst {cmd}")), "{help}");
        assert_eq!(run_ok(&cli(), &["help", cmd], &[]), help, "hostfirst help {cmd}");
        assert_eq!(run_ok(&cli(), &[cmd, "-h"], &[]), help, "hostfirst {cmd} -h");
        for (name, _) in options(&help) {
            // The top-level help is complete too: each option appears in its command's block there.
            let block = &top[top.find(&format!("  hostfirst {cmd} ")).unwrap()..];
            let block = &block[..block[3..].find("\n  hostfirst ").map_or(block.len(), |e| e + 3)];
            assert!(block.contains(&format!(" {name}")), "hostfirst --help lacks {cmd} {name}:\n{block}");
            listed.insert(name);
        }
    }
    // What the issue found missing, by name.
    let put = run_ok(&cli(), &["put", "--help"], &[]);
    for o in ["--resident", "--repeat", "--threads", "--staging-mib", "--rows", "--device"] {
        assert!(put.contains(o), "put --help lacks {o}");
    }
    assert!(run_ok(&cli(), &["gather", "--help"], &[]).contains("--prefault"));
    // Every option spelled in the CLI's sources is in the help.
    let in_sources = options_in_sources();
    let missing: Vec<_> = in_sources.difference(&listed).collect();
    assert!(missing.is_empty(), "options in cli/*.c but not in any --help: {missing:?}");
}

#[test]
fn every_listed_option_is_accepted() {
    let top = run_ok(&cli(), &["--help"], &[]);
    for cmd in commands(&top) {
        let help = run_ok(&cli(), &[&cmd, "--help"], &[]);
        for (name, value) in options(&help) {
            let sample = value.as_deref().map(|v| match v {
                "SPEC" => "cpu",
                "A:B" => "0:1",
                "PATTERN=TARGET" => "x=cpu",
                "DTYPE[:SHAPE][@OFFSET]" => "U8",
                _ => "1",
            });
            let mut args = vec![cmd.as_str(), name.as_str()];
            args.extend(sample);
            let out = run(&cli(), &args, &[]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("unknown option") && !stderr.contains("needs a value"), "{args:?}: {stderr}");
            // Also as --opt=value.
            if let Some(v) = sample {
                let joined = format!("{name}={v}");
                let out = run(&cli(), &[&cmd, &joined], &[]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(!stderr.contains("unknown option"), "{cmd} {joined}: {stderr}");
            }
        }
        let out = run(&cli(), &[&cmd, "--no-such-option"], &[]);
        assert_eq!(out.status.code(), Some(2), "{cmd} --no-such-option");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("unknown option '--no-such-option'"), "{stderr}");
        assert!(stderr.contains(&format!("usage: hostfirst {cmd}")), "{stderr}");
    }
}

/// The CLI has one build recipe, cli/build.sh: the demo, the install script, the wheel and the tests call it,
/// and nothing else compiles the CLI's sources.
#[test]
fn one_build_recipe_for_the_cli() {
    for script in ["scripts/demo.sh", "scripts/install.sh", "scripts/wheel.sh", "tests/it/common.rs"] {
        let text = std::fs::read_to_string(root().join(script)).unwrap();
        assert!(text.contains("cli/build.sh"), "{script} does not build the CLI with cli/build.sh");
    }
    let mut compiling = Vec::new();
    for dir in ["scripts", "tests/it", "benches", "bindings/python", "packaging"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains(&["cli/", "*.c"].concat()) || text.contains(&["cli/", "main.c"].concat()) {
                compiling.push(path.display().to_string());
            }
        }
    }
    compiling.retain(|p| !p.ends_with("cli_help.rs"));
    assert!(compiling.is_empty(), "these files name the CLI's sources instead of calling cli/build.sh: {compiling:?}");
}
