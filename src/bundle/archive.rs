//! The archive: one `.tar.gz`, its entries the parts (mode 0600, owner 0), written under a
//! temporary name beside `--out` and moved into place whole. Without `--force` the move
//! cannot replace a file (a hard link, which fails when the name exists).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{BundleError, Part};

pub(super) fn check_destination(out: &Path, force: bool) -> Result<(), BundleError> {
    let problem = |problem: &str| BundleError::Destination {
        path: out.to_path_buf(),
        problem: problem.to_owned(),
    };
    let folder = folder_of(out);
    match std::fs::metadata(&folder) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(problem(&format!("{} is not a folder", folder.display()))),
        Err(e) => return Err(problem(&format!("its folder {} cannot be used: {e}", folder.display()))),
    }
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.is_dir() => Err(problem("is a folder; name the archive file")),
        Ok(_) if !force => Err(BundleError::Exists(out.to_path_buf())),
        Ok(m) if !m.is_file() => Err(problem("exists and is not a regular file")),
        _ => Ok(()),
    }
}

pub(super) fn write(out: &Path, parts: &[Part], force: bool) -> Result<u64, BundleError> {
    check_destination(out, force)?;
    let failed = |source: std::io::Error| BundleError::Write {
        path: out.to_path_buf(),
        source,
    };
    let temporary = temporary_name(out);
    let written = write_archive(&temporary, parts).and_then(|size| {
        place(&temporary, out, force)?;
        Ok(size)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(failed)
}

fn write_archive(path: &Path, parts: &[Part]) -> std::io::Result<u64> {
    let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let gzip = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gzip);
    for part in parts {
        let mut header = tar::Header::new_ustar();
        header.set_size(part.body.len() as u64);
        header.set_mode(0o600);
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, part.name, part.body.as_slice())?;
    }
    let gzip = tar.into_inner()?;
    let mut file: File = gzip.finish()?;
    file.flush()?;
    file.sync_all()?;
    Ok(file.metadata()?.len())
}

/// Moves the finished archive to `out`: a rename with `force`, else a hard link that
/// fails when `out` appeared meanwhile (then the temporary file is removed).
fn place(temporary: &Path, out: &Path, force: bool) -> std::io::Result<()> {
    if force {
        std::fs::rename(temporary, out)
    } else {
        std::fs::hard_link(temporary, out)?;
        std::fs::remove_file(temporary)
    }
}

fn folder_of(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn temporary_name(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map_or_else(|| "bundle".into(), |n| n.to_string_lossy().into_owned());
    folder_of(out).join(format!(".{name}.{}.partial", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::Source;

    fn part(name: &'static str, body: &str) -> Part {
        Part {
            name,
            body: body.as_bytes().to_vec(),
            source: Source::InProcess { from: "a test".into() },
        }
    }

    fn entries(path: &Path) -> Vec<(String, String)> {
        let gzip = flate2::read::GzDecoder::new(File::open(path).unwrap());
        let mut archive = tar::Archive::new(gzip);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().display().to_string();
                let mut body = String::new();
                std::io::Read::read_to_string(&mut e, &mut body).unwrap();
                (name, body)
            })
            .collect()
    }

    #[test]
    fn the_archive_holds_every_part_and_replaces_a_file_only_when_forced() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b.tar.gz");
        let parts = [part("a.json", "{}\n"), part("b.txt", "bee")];
        let size = write(&out, &parts, false).unwrap();
        assert_eq!(size, std::fs::metadata(&out).unwrap().len());
        assert_eq!(
            entries(&out),
            [
                ("a.json".to_owned(), "{}\n".to_owned()),
                ("b.txt".to_owned(), "bee".to_owned())
            ]
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
        let again = write(&out, &parts[..1], false).unwrap_err();
        assert_eq!(again.kind(), "exists");
        assert!(again.to_string().contains("pass --force"), "{again}");
        write(&out, &parts[..1], true).unwrap();
        assert_eq!(entries(&out).len(), 1);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_destination_that_cannot_be_used_is_named_with_its_problem() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_destination(dir.path(), true).unwrap_err();
        assert!(e.to_string().ends_with("is a folder; name the archive file"), "{e}");
        let e = check_destination(&dir.path().join("no/such/b.tar.gz"), false).unwrap_err();
        assert!(
            e.to_string().contains("its folder") && e.to_string().contains("cannot be used"),
            "{e}"
        );
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let e = check_destination(&file.join("b.tar.gz"), false).unwrap_err();
        assert!(e.to_string().contains("is not a folder"), "{e}");
        assert!(check_destination(&dir.path().join("new.tar.gz"), false).is_ok());
    }
}
