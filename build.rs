//! Records the commit the binary was built from, for `switchyard --version`.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|text| text.trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SWITCHYARD_COMMIT={commit}");
    // Rebuild the version when HEAD moves, not on every source change.
    if let Some(head) = git(&["rev-parse", "--path-format=absolute", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(refs) = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]) {
        println!("cargo:rerun-if-changed={refs}/refs/heads");
        // Named only when it exists: Cargo reruns a script whose named file is missing on
        // every build, and so recompiled the crate each time in a clone with no packed refs.
        let packed = format!("{refs}/packed-refs");
        if std::path::Path::new(&packed).exists() {
            println!("cargo:rerun-if-changed={packed}");
        }
    }
}
