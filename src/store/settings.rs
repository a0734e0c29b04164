//! `settings.json`: the values an operator changed while Concert ran, which outrank flags and
//! environment at the next start.

use crate::config::table::{SETTINGS, setting};
use crate::config::{Config, Source};
use crate::room::WallTime;
use serde::{Deserialize, Serialize};
use std::path::Path;

use super::{DataDir, PersistError, json_object};

pub(crate) const SETTINGS_FILE: &str = "settings.json";

/// `settings.json`: only the values an operator changed at runtime.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct SettingsFile {
    #[serde(default)]
    pub version: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub updated: String,
    #[serde(default)]
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Keys beside `version`, `updated` and `settings`, most likely a setting put at the top level
    /// by hand; reported at start-up, never written back.
    #[serde(flatten, skip_serializing)]
    pub misplaced: serde_json::Map<String, serde_json::Value>,
}

impl SettingsFile {
    /// Parses the file; a version from the future or invalid JSON is an error naming the file.
    pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<SettingsFile, PersistError> {
        let corrupt = |message: String| PersistError::Corrupt {
            path: path.to_path_buf(),
            message,
        };
        let file: SettingsFile =
            json_object(bytes).map_err(|e| corrupt(format!("invalid JSON: {e}")))?;
        if file.version > 1 {
            return Err(corrupt(format!(
                "version {} is newer than this concert understands (1)",
                file.version
            )));
        }
        Ok(file)
    }

    /// Indented JSON with a trailing newline, as operators read and diff it.
    pub(crate) fn render(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Applies `settings.json` on top of flags/env/defaults. Unknown and restart-only keys are logged
/// and skipped (an old file must not stop a newer binary); a value of the wrong type or out of
/// range stops start-up naming the file. Returns how many values were applied.
pub(crate) fn apply_settings_file(
    dir: &DataDir,
    config: &mut Config,
) -> Result<usize, PersistError> {
    let path = dir.file(SETTINGS_FILE);
    let Some(bytes) = dir.read(SETTINGS_FILE)? else {
        return Ok(0);
    };
    let file = SettingsFile::parse(&path, &bytes)?;
    for key in file.misplaced.keys() {
        tracing::warn!(
            file = %path.display(),
            key = %key,
            "key outside \"settings\" ignored (settings belong inside the \"settings\" object)"
        );
    }
    let mut applied = 0;
    for (key, value) in &file.settings {
        match setting(key) {
            None => {
                tracing::warn!(file = %path.display(), key = %key, "unknown setting ignored");
                continue;
            }
            Some((_, def)) if def.restart => {
                tracing::warn!(
                    file = %path.display(),
                    key = %key,
                    "restart-only setting ignored in the file: set {} in the environment",
                    def.env
                );
                continue;
            }
            Some(_) => {}
        }
        config
            .set_json(key, value)
            .map_err(|message| PersistError::Corrupt {
                path: path.clone(),
                message,
            })?;
        applied += 1;
    }
    Ok(applied)
}

/// Writes every value whose source is the file (or a live change) to `settings.json`.
pub(crate) fn save_settings(dir: &DataDir, config: &Config) -> Result<(), PersistError> {
    let _ordered = dir.ordered();
    let mut file = SettingsFile {
        version: 1,
        updated: WallTime::from_system(std::time::SystemTime::now()).to_string(),
        ..SettingsFile::default()
    };
    for def in SETTINGS {
        if config.source(def.key) == Source::File
            && let Some(value) = config.value_json(def.key)
        {
            file.settings.insert(def.key.to_string(), value);
        }
    }
    dir.write_atomic(SETTINGS_FILE, &file.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_must_be_a_json_object() {
        let path = Path::new("/data/settings.json");
        for bad in [&b"[1,\"\",{\"cap\":5}]"[..], b"[]", b"5", b"null"] {
            let error = SettingsFile::parse(path, bad).unwrap_err().to_string();
            assert!(error.contains("/data/settings.json"), "{error}");
        }
        let file = SettingsFile::parse(path, br#"{"version":1,"settings":{"cap":5}}"#).unwrap();
        assert_eq!(file.settings["cap"], 5);
    }

    #[test]
    fn settings_file_round_trips_and_refuses_garbage() {
        let path = Path::new("/data/settings.json");
        let mut file = SettingsFile {
            version: 1,
            updated: "2026-11-30T10:00:00Z".into(),
            ..SettingsFile::default()
        };
        file.settings.insert("cap".into(), serde_json::json!(9));
        let bytes = file.render();
        assert!(bytes.ends_with(b"}\n"));
        assert!(String::from_utf8_lossy(&bytes).contains("  \"settings\""));
        let back = SettingsFile::parse(path, &bytes).unwrap();
        assert_eq!(back.settings["cap"], 9);
        let err = SettingsFile::parse(path, b"{").unwrap_err();
        assert!(err.to_string().starts_with("/data/settings.json"), "{err}");
        assert!(SettingsFile::parse(path, br#"{"version":2}"#).is_err());
        assert!(SettingsFile::parse(path, br#"{"settings":{}}"#).is_ok());
    }

    #[test]
    fn keys_beside_settings_are_kept_apart_and_never_written_back() {
        let path = Path::new("/data/settings.json");
        let file = SettingsFile::parse(
            path,
            br#"{"version":1,"settings":{"cap":3},"stream_cap":1}"#,
        )
        .unwrap();
        assert_eq!(file.settings["cap"], 3);
        assert_eq!(
            file.misplaced.keys().collect::<Vec<_>>(),
            vec!["stream_cap"]
        );
        assert!(!String::from_utf8_lossy(&file.render()).contains("stream_cap"));
    }
}
