//! The password the lab signs in to targets with (`{lab_password}` in a scenario's `login`
//! form), drawn anew for each run, and its argon2id hash in a file of the run's work
//! directory (`{lab_password_hash_file}` in a target's command), so that no password of the
//! lab's is published with the repository and reused by whoever copies its commands.

use std::path::{Path, PathBuf};

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::Argon2;

/// A run's password and the file holding its hash.
#[derive(Debug, Clone)]
pub(super) struct LabPassword {
    /// 32 random hex digits.
    pub(super) password: String,
    /// Its argon2id hash (a PHC string), one line.
    pub(super) hash_file: PathBuf,
}

impl LabPassword {
    /// A new password, its hash written to `work/lab-password.hash` (mode 0600).
    pub(super) fn new(work: &Path) -> Result<LabPassword, String> {
        let random = |n: usize| -> Result<Vec<u8>, String> {
            let mut bytes = vec![0u8; n];
            getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes: {e}"))?;
            Ok(bytes)
        };
        let password: String = random(16)?.iter().map(|b| format!("{b:02x}")).collect();
        let salt = SaltString::encode_b64(&random(16)?).map_err(|e| e.to_string())?;
        let hash = Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map_err(|e| format!("hashing the lab's password: {e}"))?;
        let hash_file = work.join("lab-password.hash");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&hash_file)?;
            writeln!(f, "{hash}")
        };
        write().map_err(|e| format!("{}: {e}", hash_file.display()))?;
        Ok(LabPassword {
            password,
            hash_file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::{PasswordHash, PasswordVerifier};

    #[test]
    fn each_run_draws_a_password_its_file_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let one = LabPassword::new(dir.path()).unwrap();
        let text = std::fs::read_to_string(&one.hash_file).unwrap();
        let hash = PasswordHash::new(text.trim()).unwrap();
        assert!(Argon2::default()
            .verify_password(one.password.as_bytes(), &hash)
            .is_ok());
        assert!(Argon2::default()
            .verify_password(b"brisk-demo-admin", &hash)
            .is_err());
        let two = LabPassword::new(dir.path()).unwrap();
        assert_ne!(one.password, two.password);
        assert_eq!(one.password.len(), 32);
    }
}
