//! Brisk's macros, re-exported by `brisk`: use them as `brisk::migrations!`.

use std::path::Path;

use proc_macro::{TokenStream, TokenTree};

/// The `*.sql` files of a directory (relative to the crate's `Cargo.toml`), embedded in the
/// program as a `brisk::db::Migrations`, in version order. Each file's name is
/// `NNNN_what_it_does.sql`; a name that is not, or a version used twice, is a compile error.
///
/// A file edited is compiled in again; a file added is seen by the next build of the crate
/// (to have it seen at once, add a `build.rs` printing `cargo:rerun-if-changed=DIR`).
///
/// ```ignore
/// let migrations = brisk::migrations!("migrations");
/// ```
#[proc_macro]
pub fn migrations(input: TokenStream) -> TokenStream {
    match expand(input) {
        Ok(code) => code.parse().expect("the expansion is Rust"),
        Err(why) => format!("compile_error!({why:?});")
            .parse()
            .expect("compile_error! is Rust"),
    }
}

fn expand(input: TokenStream) -> Result<String, String> {
    let tokens: Vec<TokenTree> = input.into_iter().collect();
    let dir = match tokens.as_slice() {
        [TokenTree::Literal(literal)] => string_literal(&literal.to_string())?,
        _ => return Err("migrations! takes one string: the directory of the .sql files".into()),
    };
    let base = std::env::var("CARGO_MANIFEST_DIR")
        .map_err(|_| "CARGO_MANIFEST_DIR is not set (build with cargo)".to_string())?;
    let dir = Path::new(&base).join(dir);
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| format!("migrations!: cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<(u64, String, String)> = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("migrations!: {e}"))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("sql") {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("migrations!: {} is not UTF-8", path.display()))?
            .to_string();
        let full = path
            .to_str()
            .ok_or_else(|| format!("migrations!: {} is not UTF-8", path.display()))?
            .to_string();
        files.push((version(&name)?, name, full));
    }
    files.sort();
    for pair in files.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(format!(
                "migrations!: {} and {} have the same version",
                pair[0].1, pair[1].1
            ));
        }
    }
    let items: Vec<String> = files
        .iter()
        .map(|(_, name, full)| format!("({name:?}, ::core::include_str!({full:?}))"))
        .collect();
    Ok(format!(
        "::brisk::db::Migrations::embedded(&[{}])",
        items.join(", ")
    ))
}

/// The version a migration file's name starts with.
fn version(name: &str) -> Result<u64, String> {
    let stem = name.strip_suffix(".sql").unwrap_or(name);
    let digits: String = stem.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !stem[digits.len()..].starts_with('_') {
        return Err(format!(
            "migrations!: {name}: a migration file's name is NNNN_what_it_does.sql"
        ));
    }
    digits
        .parse()
        .map_err(|_| format!("migrations!: {name}: the version is too large"))
}

/// The text of a string literal as written (`"dir"` or `r"dir"`).
fn string_literal(written: &str) -> Result<String, String> {
    let inner = written
        .strip_prefix('r')
        .unwrap_or(written)
        .trim_matches('#');
    inner
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .filter(|s| !s.contains('\\'))
        .map(str::to_string)
        .ok_or_else(|| format!("migrations! takes a plain string, not {written}"))
}
