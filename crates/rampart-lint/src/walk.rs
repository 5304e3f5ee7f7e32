//! Finding the Rust sources under the paths given on the command line.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A path that could not be read while walking.
#[derive(Debug)]
pub struct WalkError {
    /// The path that failed.
    pub path: PathBuf,
    /// Why.
    pub error: io::Error,
}

/// The Rust files under `root`, in a stable (sorted) order, and the paths
/// that could not be read.
///
/// A file given directly is returned as is, whatever its extension. A
/// directory is walked recursively for `*.rs` files, skipping `target`
/// directories, hidden directories (names starting with `.`) and symbolic
/// links to directories (which could form cycles). `root` itself is never
/// skipped, so `.` works.
pub fn rust_files(root: &Path) -> (Vec<PathBuf>, Vec<WalkError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    match fs::metadata(root) {
        Ok(metadata) if metadata.is_dir() => walk_dir(root, &mut files, &mut errors),
        Ok(_) => files.push(root.to_path_buf()),
        Err(error) => errors.push(WalkError {
            path: root.to_path_buf(),
            error,
        }),
    }
    (files, errors)
}

fn walk_dir(dir: &Path, files: &mut Vec<PathBuf>, errors: &mut Vec<WalkError>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            errors.push(WalkError {
                path: dir.to_path_buf(),
                error,
            });
            return;
        }
    };
    let mut children = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => children.push(entry),
            Err(error) => errors.push(WalkError {
                path: dir.to_path_buf(),
                error,
            }),
        }
    }
    children.sort_by_key(fs::DirEntry::file_name);

    for entry in children {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let file_type = match entry.file_type() {
            Ok(file_type) => file_type,
            Err(error) => {
                errors.push(WalkError { path, error });
                continue;
            }
        };
        if file_type.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk_dir(&path, files, errors);
            }
        } else if is_rust_file(&path) {
            // A symbolic link counts when it points at a file.
            if !file_type.is_symlink() || path.is_file() {
                files.push(path);
            }
        }
    }
}

fn is_rust_file(path: &Path) -> bool {
    path.extension().is_some_and(|extension| extension == "rs")
}

#[cfg(test)]
mod tests {
    use super::rust_files;
    use std::path::Path;

    #[test]
    fn a_missing_root_is_an_error_not_a_panic() {
        let (files, errors) = rust_files(Path::new("/definitely/not/here/rampart-lint"));
        assert!(files.is_empty());
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn fixtures_directory_yields_sorted_rust_files() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let (files, errors) = rust_files(&root);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(files.len() >= 5);
        assert!(files.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(
            files
                .iter()
                .all(|file| file.extension().is_some_and(|e| e == "rs"))
        );
    }
}
