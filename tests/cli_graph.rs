//! `hearth graph validate | visualize | diff` on contract files.

use std::process::Command;

fn hearth(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SHOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/shop.toml");

#[test]
fn validate_visualize_and_diff() {
    let (ok, out, err) = hearth(&["graph", "validate", "--strict", SHOP]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("0 error(s), 0 warning(s)"), "{out}");
    let (ok, out, _) = hearth(&["graph", "visualize", SHOP]);
    assert!(
        ok && out.starts_with("flowchart TD") && out.contains("main --> search"),
        "{out}"
    );
    assert!(out.contains("trend --> END"), "{out}");

    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path().join("b.toml");
    std::fs::write(
        &b,
        std::fs::read_to_string(SHOP)
            .unwrap()
            .replace("priority = 60", "priority = 65"),
    )
    .unwrap();
    let (ok, out, _) = hearth(&["graph", "diff", SHOP, b.to_str().unwrap()]);
    assert!(
        ok && out.contains("~ node search") && out.contains("65"),
        "{out}"
    );
}

#[test]
fn bad_contracts_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = tmp.path().join("bad.yaml");
    std::fs::write(
        &yaml,
        "nodes:\n  - name: a\n    reads: [orders]\n    writes: [response]\n    trigger_conditions: [{priority: 1, when: {cart.ready: true}}]\n  - name: b\n    writes: [request]\n    trigger_conditions: [{priority: 1}]\n",
    )
    .unwrap();
    let (ok, out, err) = hearth(&["graph", "validate", yaml.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        out.contains("ERROR: a: reads unknown slice `orders`"),
        "{out}"
    );
    assert!(
        out.contains("ERROR: a: trigger path `cart.ready` names unknown slice `cart`"),
        "{out}"
    );
    assert!(out.contains("WARNING: b: writes `request`"), "{out}");
    assert!(err.contains("bad.yaml"), "{err}");

    let dup = tmp.path().join("dup.toml");
    std::fs::write(&dup, "[[nodes]]\nname = \"x\"\n[[nodes]]\nname = \"x\"\n").unwrap();
    let (ok, _, err) = hearth(&["graph", "validate", dup.to_str().unwrap()]);
    assert!(!ok && err.contains("two nodes are named `x`"), "{err}");

    let typo = tmp.path().join("typo.toml");
    std::fs::write(&typo, "[[nodes]]\nname = \"x\"\nreeds = [\"request\"]\n").unwrap();
    let (ok, _, err) = hearth(&["graph", "validate", typo.to_str().unwrap()]);
    assert!(
        !ok && err.contains("typo.toml") && err.contains("reeds"),
        "{err}"
    );
}

#[test]
fn a_missing_entry_supervisor_is_named() {
    let (ok, out, _) = hearth(&["graph", "validate", "--entry", "nosuch", SHOP]);
    assert!(!ok);
    assert!(
        out.contains("ERROR: entry supervisor `nosuch` has no nodes (supervisors: main"),
        "{out}"
    );
    assert!(!out.contains("unreachable"), "{out}");
}
