//! The SMB server's module layering (ARCHITECTURE.md, "the SMB server's
//! modules import in layers"): read from the sources, every
//! `super::MODULE` a file names outside comments is an import of that
//! module. `state` and `plan` sit at the bottom, `conn` imports no
//! handler, and no two files import each other, directly or around a
//! longer circle.

use std::collections::{BTreeMap, BTreeSet};

fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/smb2/server");
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            files.insert(name, std::fs::read_to_string(&p).unwrap());
        }
    }
    let modules: BTreeSet<String> = files.keys().filter(|m| *m != "mod").cloned().collect();
    let mut out = BTreeMap::new();
    for (name, text) in &files {
        if name == "mod" {
            continue;
        }
        let mut deps = BTreeSet::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (i, _) in code.match_indices("super::") {
                let rest = &code[i + 7..];
                let m: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if modules.contains(&m) && m != *name {
                    deps.insert(m);
                }
            }
        }
        out.insert(name.clone(), deps);
    }
    out
}

#[test]
fn the_smb_server_modules_import_in_layers_without_circles() {
    let g = imports();
    assert!(g.len() >= 14, "{:?}", g.keys());
    let allowed = |m: &str, ok: &[&str]| {
        let extra: Vec<&String> = g[m].iter().filter(|d| !ok.contains(&d.as_str())).collect();
        assert!(extra.is_empty(), "{m} imports {extra:?}");
    };
    allowed("state", &["crypto"]);
    allowed("plan", &["crypto", "state"]);
    allowed("crypto", &[]);
    allowed("info", &[]);
    allowed("sharemode", &["plan", "state"]);
    allowed("conn", &["crypto", "info", "plan", "state"]);
    // No circle: a depth-first walk never meets a module on its path.
    fn walk(g: &BTreeMap<String, BTreeSet<String>>, m: &str, path: &mut Vec<String>) {
        if let Some(i) = path.iter().position(|p| p == m) {
            panic!("import circle: {:?} -> {m}", &path[i..]);
        }
        path.push(m.to_string());
        for d in &g[m] {
            walk(g, d, path);
        }
        path.pop();
    }
    for m in g.keys() {
        walk(&g, m, &mut Vec::new());
    }
}
