//! Bundles Redoc, the reference pages' renderer, into the crate at build: the npm registry's
//! tarball of a pinned version, checked against its pinned SHA-512, so nothing is fetched from a
//! CDN when a page is served (docs/openapi.md).

use sha2::{Digest, Sha512};
use std::path::{Path, PathBuf};
use std::process::Command;

const REDOC_VERSION: &str = "2.5.2";
/// SHA-512 of `redoc-2.5.2.tgz` as the npm registry serves it.
const REDOC_SHA512: &str = "b1325f22dbd191c0d3a2307ac1d2cde0cf946ba9a5670125576d537fc327ec86d017fd4eb3a1af810a59c8b58f1996476e1cbb182d4eaf58533077f3d6f2a1e4";
const BUNDLE: &str = "package/bundles/redoc.standalone.js";
const LICENSE: &str = "package/bundles/redoc.standalone.js.LICENSE.txt";
const LOGO: &str = "\"https://cdn.redoc.ly/redoc/logo-mini.svg\"";
const INLINE_LOGO: &str = "\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 1 1'/%3E\"";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let tarball = out.join(format!("redoc-{REDOC_VERSION}.tgz"));
    if !tarball.exists() || !matches_pin(&tarball) {
        run(
            Command::new("npm")
                .args(["pack", &format!("redoc@{REDOC_VERSION}"), "--silent", "--pack-destination"])
                .arg(&out),
            NEED_NPM,
        );
    }
    assert!(matches_pin(&tarball), "{} does not have the pinned SHA-512", tarball.display());
    run(
        Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(&out).args([BUNDLE, LICENSE]),
        "tar is needed to unpack the Redoc bundle",
    );
    let bundle = read(&out.join(BUNDLE));
    let license = read(&out.join(LICENSE));
    // The source map is not served: without this line a browser's devtools would ask for it.
    let code: String =
        bundle.lines().filter(|line| !line.starts_with("//# sourceMappingURL=")).collect::<Vec<_>>().join("\n");
    // The sidebar's attribution logo is Redoc's one request to elsewhere (a CDN): served inline.
    assert_eq!(code.matches(LOGO).count(), 1, "Redoc {REDOC_VERSION}: its logo URL moved; update build.rs");
    let code = code.replace(LOGO, INLINE_LOGO);
    let script = format!(
        "/* Redoc {REDOC_VERSION} (MIT), from the npm registry.\n{}\n*/\n{code}\n",
        license.replace("*/", "* /")
    );
    std::fs::write(out.join("redoc.standalone.js"), script).expect("OUT_DIR is writable");
}

fn matches_pin(tarball: &Path) -> bool {
    std::fs::read(tarball).map(|bytes| hex(&Sha512::digest(&bytes)) == REDOC_SHA512).unwrap_or(false)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Said when npm cannot be started: a fresh target directory needs it (README.md, "Two commands").
const NEED_NPM: &str = "Node.js and npm are needed to build the API reference pages (Redoc bundle): install them \
    (e.g. apt-get install nodejs npm) and build again; README.md, \"Two commands\", lists what a build needs";

/// Runs `command`; `needs` says what to install when it cannot be started at all.
fn run(command: &mut Command, needs: &str) {
    let status = command.status().unwrap_or_else(|err| panic!("{needs}\n(cannot run {command:?}: {err})"));
    assert!(status.success(), "{command:?} failed: {status}");
}
