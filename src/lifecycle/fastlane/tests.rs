//! The swap's rollback: when the new lane cannot be built after its files were written, the
//! previous files come back and so does a lane built from the previous documents (or, when
//! even that fails, the lane is off and the answer says so).

use super::*;
use crate::fastlane::settings::{example_fastlane, example_networks};

const NEW_MERCHANT: &str = "A merchant whose lane will not build";

/// [`build`], except for documents naming [`NEW_MERCHANT`], which it refuses as a journal that
/// cannot be opened would.
fn refuses_the_new_documents(
    app: &Arc<App>,
    data_dir: &Path,
    files: &LaneFiles,
    settings: FastlaneSettings,
    networks: NetworksSettings,
) -> Result<RunningLane, String> {
    if settings.merchant == NEW_MERCHANT {
        return Err("the receipt journal could not be opened".into());
    }
    build(app, data_dir, files, settings, networks)
}

/// Refuses every lane: the new one, and the previous one built again.
fn refuses_every_lane(
    _: &Arc<App>,
    _: &Path,
    _: &LaneFiles,
    _: FastlaneSettings,
    _: NetworksSettings,
) -> Result<RunningLane, String> {
    Err("the receipt journal could not be opened".into())
}

/// An app with a data directory holding the example files, its lane started.
fn started() -> (tempfile::TempDir, Arc<App>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FASTLANE_FILE), example_fastlane()).unwrap();
    std::fs::write(dir.path().join(NETWORKS_FILE), example_networks()).unwrap();
    let data_dir = Arc::new(DataDir::open(dir.path()).unwrap());
    let mut config = Config::default();
    config.admit_secret = Some(vec![7; 32]);
    config.admit_secret_generated = false;
    let app = App::with_data_dir(config.clone(), config, Some(data_dir.clone())).unwrap();
    start(&app, Some(&data_dir)).unwrap();
    assert!(app.fast_lane().is_some(), "the example lane starts");
    (dir, app)
}

fn new_documents() -> Vec<u8> {
    let mut document: serde_json::Value = serde_json::from_str(example_fastlane()).unwrap();
    document["merchant"] = NEW_MERCHANT.into();
    serde_json::to_vec_pretty(&document).unwrap()
}

#[tokio::test]
async fn a_lane_that_cannot_be_built_brings_back_the_previous_files_and_lane() {
    let (dir, app) = started();
    let fastlane = new_documents();
    let outcome = swap_files(
        &app,
        LaneDocuments {
            fastlane: &fastlane,
            networks: example_networks().as_bytes(),
            dry_run: false,
        },
        refuses_the_new_documents,
    )
    .await;
    match outcome {
        Err(SaveError::NotBuilt { restored: true, .. }) => {}
        other => panic!("expected a rollback, got {other:?}"),
    }
    let on_disk = std::fs::read_to_string(dir.path().join(FASTLANE_FILE)).unwrap();
    assert_eq!(on_disk, example_fastlane(), "the previous file is back");
    let lane = app.fast_lane().expect("a lane serves again");
    assert_eq!(lane.settings().merchant, "Example Shop");
    assert!(lane.journal().is_healthy(), "its journal is open again");
    assert!(!app.fastlane.is_reloading(), "the flag is down");
    // The flag is free for the next save, which goes through.
    let mut cheaper: serde_json::Value = serde_json::from_str(example_fastlane()).unwrap();
    cheaper["pass_seconds"] = 600.into();
    let cheaper = serde_json::to_vec(&cheaper).unwrap();
    let saved = save_files(
        &app,
        LaneDocuments {
            fastlane: &cheaper,
            networks: example_networks().as_bytes(),
            dry_run: false,
        },
    )
    .await
    .expect("the next save");
    assert!(saved.running);
    assert_eq!(app.fast_lane().unwrap().settings().pass_seconds, 600);
    app.fastlane.stop(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn when_neither_lane_can_be_built_the_lane_is_off_and_the_answer_says_so() {
    let (dir, app) = started();
    let fastlane = new_documents();
    let outcome = swap_files(
        &app,
        LaneDocuments {
            fastlane: &fastlane,
            networks: example_networks().as_bytes(),
            dry_run: false,
        },
        refuses_every_lane,
    )
    .await;
    let error = match outcome {
        Err(
            error @ SaveError::NotBuilt {
                restored: false, ..
            },
        ) => error,
        other => panic!("expected the lane off, got {other:?}"),
    };
    assert!(error.to_string().contains("off"), "{error}");
    assert!(app.fast_lane().is_none());
    let on_disk = std::fs::read_to_string(dir.path().join(FASTLANE_FILE)).unwrap();
    assert_eq!(on_disk, example_fastlane(), "the previous file is back");
}

#[tokio::test]
async fn a_dry_run_checks_without_writing_and_a_broken_file_lists_its_problems() {
    let (dir, app) = started();
    let outcome = save_files(
        &app,
        LaneDocuments {
            fastlane: &new_documents(),
            networks: example_networks().as_bytes(),
            dry_run: true,
        },
    )
    .await
    .expect("valid documents");
    assert!(outcome.dry_run);
    let on_disk = std::fs::read_to_string(dir.path().join(FASTLANE_FILE)).unwrap();
    assert_eq!(on_disk, example_fastlane());
    let mut broken: serde_json::Value = serde_json::from_str(example_fastlane()).unwrap();
    broken["pass_seconds"] = 1.into();
    broken["merchant"] = "".into();
    let broken = serde_json::to_vec(&broken).unwrap();
    let outcome = save_files(
        &app,
        LaneDocuments {
            fastlane: &broken,
            networks: b"{\"xrpl:1\": {\"rpc\": \"http://ledger.example\"}}",
            dry_run: true,
        },
    )
    .await;
    let Err(SaveError::Invalid(problems)) = outcome else {
        panic!("expected problems, got {outcome:?}");
    };
    assert!(problems.len() >= 3, "{problems:?}");
    app.fastlane.stop(Duration::from_secs(1)).await;
}
