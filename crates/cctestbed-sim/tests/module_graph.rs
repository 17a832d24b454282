//! The crate's modules depend on one another without a circle: each file's `crate::` and
//! `super::` paths (in `use` declarations and written out inline, tests left out) give its edges
//! to the modules they name, and the graph must have no cycle. A module's own submodules are not
//! counted as its dependencies: `qdisc` registers `qdisc::codel`, which builds on `qdisc`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("qdisc::codel") -> source text, for every file under `src` but the binaries.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("an entry").path();
            let rel = path.strip_prefix(src).expect("below src");
            if rel.starts_with("bin") {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut parts: Vec<String> = rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                    parts.pop();
                }
                out.insert(parts.join("::"), std::fs::read_to_string(&path).expect("a source file"));
            }
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)]` modules.
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect();
    let mut code = lines.join("\n");
    while let Some(at) = code.find("#[cfg(test)]") {
        let rest = &code[at..];
        let Some(open) = rest.find(['{', ';']) else { break };
        let end = if rest.as_bytes()[open] == b';' {
            at + open + 1
        } else {
            let mut depth = 0;
            let mut end = code.len();
            for (i, ch) in rest.char_indices().skip(open) {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = at + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        code.replace_range(at..end, "");
    }
    code
}

/// Every path a `use` tree names, expanded: `a::{b, c::{d, e}}` gives a::b, a::c::d, a::c::e.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or("").trim().to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items.into_iter().filter(|s| !s.trim().is_empty()).flat_map(|s| expand(s)).map(|s| format!("{prefix}{s}")).collect()
}

/// The paths a file names from its crate: `use` trees, then inline `crate::a::b` paths; each as
/// segments from the crate root (`super::` resolved from `module`).
fn named_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let parent: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let parent = &parent[..parent.len().saturating_sub(1)];
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
        let stmt_end = rest[i..].find(';').map_or(rest.len(), |e| i + e);
        if before_ok {
            paths.extend(expand(&rest[i + 4..stmt_end]));
        }
        rest = &rest[(i + 4).min(rest.len())..];
    }
    let mut inline = code;
    while let Some(i) = inline.find("crate::") {
        let tail = &inline[i..];
        let end = tail.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(tail.len());
        paths.push(tail[..end].to_string());
        inline = &inline[i + 7..];
    }
    paths
        .into_iter()
        .filter_map(|p| {
            let segs: Vec<String> = p.split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty() && s != "self").collect();
            match segs.first().map(String::as_str) {
                Some("crate") => Some(segs[1..].to_vec()),
                Some("super") => Some(parent.iter().map(|s| s.to_string()).chain(segs[1..].iter().cloned()).collect()),
                _ => None,
            }
        })
        .collect()
}

/// The module a path lands in: its longest prefix that is a module file.
fn target(modules: &BTreeMap<String, String>, segs: &[String]) -> Option<String> {
    (1..=segs.len()).rev().map(|n| segs[..n].join("::")).find(|m| modules.contains_key(m))
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let mut edges = BTreeMap::new();
    for (m, text) in &modules {
        let mut out = BTreeSet::new();
        for segs in named_paths(m, &code(text)) {
            if let Some(t) = target(&modules, &segs) {
                let own_part = !m.is_empty() && t.starts_with(&format!("{m}::"));
                if t != *m && !own_part && !m.is_empty() {
                    out.insert(t);
                }
            }
        }
        edges.insert(m.clone(), out);
    }
    edges
}

/// A cycle, as the modules along it, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for t in &edges[m] {
            match state.get(t.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == t).expect("on the stack");
                    return Some(stack[from..].iter().cloned().chain([t.clone()]).collect());
                }
                0 => {
                    if let Some(c) = visit(t, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if !state.contains_key(m) {
            if let Some(c) = visit(m, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn modules_depend_on_one_another_without_a_circle() {
    let edges = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // the graph is read: the configuration assembles the parts, which do not read it
    assert!(edges["config"].contains("qdisc") && edges["config"].contains("link"), "{:?}", edges["config"]);
    assert!(edges["qdisc::codel"].contains("qdisc"), "{:?}", edges["qdisc::codel"]);
    for part in ["qdisc", "qdisc::codel", "link", "datagram", "capture", "tcp::receiver", "time"] {
        assert!(!edges[part].contains("config"), "{part} reads the configuration: {:?}", edges[part]);
    }
    if let Some(c) = cycle(&edges) {
        panic!("modules in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn a_circle_is_found() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")] {
        edges.entry(a.into()).or_default().insert(b.into());
        edges.entry(b.into()).or_default();
    }
    assert_eq!(cycle(&edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    assert_eq!(expand("crate::x::{a, b::{c, d as e}}"), ["crate::x::a", "crate::x::b::c", "crate::x::b::d"]);
}
