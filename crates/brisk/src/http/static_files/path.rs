//! URL path normalisation: the percent-encoded path below the mount point becomes a relative
//! file system path that cannot leave the root (or a `400`/`404`), and the normal form that
//! keys the cache, found without decoding or allocating for a path already in it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use http::StatusCode;

/// Splits and decodes the URL path into a relative path that cannot leave the
/// root. Returns whether it ended with `/` (a directory request).
pub(crate) fn parse_path(path: &str) -> Result<(PathBuf, bool), StatusCode> {
    // A raw '?' or '#' cannot be part of a path; be lenient if a caller passed
    // the query along.
    let path = path.split(['?', '#']).next().unwrap_or("");
    let bytes = path.as_bytes();
    // Validate all percent-encoding first, so `%zz` is 400 wherever it is.
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let valid = bytes.len() > i + 2
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit();
            if !valid {
                return Err(StatusCode::BAD_REQUEST);
            }
            i += 3;
        } else {
            i += 1;
        }
    }

    let mut relative = PathBuf::new();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
        let hidden = decoded.first() == Some(&b'.');
        let smuggled = decoded.iter().any(|&b| b == b'/' || b == b'\\' || b == 0);
        if hidden || smuggled {
            return Err(StatusCode::NOT_FOUND);
        }
        relative.push(OsStr::from_bytes(&decoded));
    }
    Ok((relative, path.is_empty() || path.ends_with('/')))
}

/// The normal form of a URL path, as [`parse_path`] decodes it: `/`, the
/// decoded segments joined by `/`, and a trailing `/` for a directory
/// request. The cache's key, so that `/a.txt`, `//a.txt`, `/%61.txt` and
/// `/a.txt?v=2` share one entry.
pub(super) fn cache_key(relative: &Path, trailing_slash: bool) -> Vec<u8> {
    let relative = relative.as_os_str().as_bytes();
    let mut key = Vec::with_capacity(relative.len() + 2);
    key.push(b'/');
    key.extend_from_slice(relative);
    if trailing_slash && !relative.is_empty() {
        key.push(b'/');
    }
    key
}

/// `path` itself when it is already its own [`cache_key`], so the cache can
/// be looked up without decoding or allocating: it starts with `/` and has no
/// `%`, `\`, NUL, `?` or `#`, no empty segment (`//`) and no segment starting
/// with `.`. Such a path always passes [`parse_path`]. Anything else takes the
/// slow way (which is also where it gets its `400` or `404`).
pub(super) fn normal_key(path: &str) -> Option<&str> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return None;
    }
    let mut previous = 0;
    for &byte in bytes {
        match byte {
            b'%' | b'\\' | 0 | b'?' | b'#' => return None,
            b'/' | b'.' if previous == b'/' => return None,
            _ => previous = byte,
        }
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::static_files::testing::*;

    #[test]
    fn traversal_never_escapes_the_root() {
        let dir = TempDir::new();
        dir.write("a/inner.txt", b"inner");
        run(async {
            let files = dir.files();
            for path in [
                "/../etc/passwd",
                "/../x",
                "/../secret.txt",
                "../x",
                "/%2e%2e/x",
                "/%2E%2E/secret.txt",
                "/.%2e/x",
                "/a/%2E%2e/%2e%2E/x",
                "/a/../../x",
                "/a%2f..%2f..%2fx",
                "/a%2F..%2F..%2Fsecret.txt",
                "/%00",
                "/a/inner.txt%00",
                "/..%5c..%5cx",
                "/a\\..\\..\\x",
                "/%5c..%5cx",
                "/./a/inner.txt",
            ] {
                let (status, content) = fetch(&files, path).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
                assert_ne!(content, SECRET, "{path}");
            }
        });
    }

    #[test]
    fn invalid_percent_encoding_is_400() {
        let dir = TempDir::new();
        dir.write("a.txt", b"a");
        run(async {
            let files = dir.files();
            for path in ["/%zz", "/a%4", "/a.txt%", "/%g0/a.txt", "/..%2/x"] {
                assert_eq!(
                    fetch(&files, path).await.0,
                    StatusCode::BAD_REQUEST,
                    "{path}"
                );
            }
        });
    }

    #[test]
    fn dotfiles_are_hidden() {
        let dir = TempDir::new();
        dir.write(".env", b"PASSWORD=1");
        dir.write(".git/config", b"[core]");
        run(async {
            let files = dir.files();
            assert_eq!(fetch(&files, "/.env").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/%2eenv").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/.git/config").await.0, StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn normal_paths_are_their_own_cache_key() {
        // Every string of up to 5 of these characters: whenever `normal_key`
        // takes the shortcut, `parse_path` accepts the path and its key is
        // the path itself.
        const ALPHABET: &[u8] = b"/a.%61?\\";
        let mut paths = vec![String::new()];
        let mut shortcuts = 0;
        for _ in 0..5 {
            paths = paths
                .iter()
                .flat_map(|p| ALPHABET.iter().map(move |&c| format!("{p}{}", c as char)))
                .collect();
            for path in &paths {
                if let Some(normal) = normal_key(path) {
                    shortcuts += 1;
                    let (relative, trailing_slash) = parse_path(path).unwrap();
                    assert_eq!(
                        cache_key(&relative, trailing_slash),
                        normal.as_bytes(),
                        "{path}"
                    );
                }
            }
        }
        assert!(shortcuts > 100, "{shortcuts}");
        for normal in ["/", "/a/b.txt", "/a/", "/a b/c", "/é.txt", "/a.b/c..d"] {
            assert_eq!(normal_key(normal), Some(normal));
        }
        for odd in [
            "", "a", "//a", "/a//b", "/%61", "/a?x", "/a#x", "/.a", "/a/.b", "/a\\b",
        ] {
            assert_eq!(normal_key(odd), None, "{odd}");
        }
        for (odd, key) in [
            ("", "/"),
            ("//a", "/a"),
            ("/%61", "/a"),
            ("/a?x", "/a"),
            ("/a//b/", "/a/b/"),
            ("/a%20b/", "/a b/"),
        ] {
            let (relative, trailing_slash) = parse_path(odd).unwrap();
            assert_eq!(
                cache_key(&relative, trailing_slash),
                key.as_bytes(),
                "{odd}"
            );
        }
    }
}
