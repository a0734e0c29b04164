//! The generated documentation stays in step with the code: the committed reference, README flag
//! table, man page and completions equal what the generator renders now, and the reference names
//! exactly the flags `concert -h` prints.

#[path = "../tools/gen-docs/render.rs"]
mod render;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn committed_docs_match_the_generator() {
    let root = Path::new(ROOT);
    let mut stale = Vec::new();
    for output in render::outputs(root).unwrap() {
        let committed = std::fs::read_to_string(root.join(&output.path)).unwrap_or_default();
        if committed != output.contents {
            stale.push(output.path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "out of date: {stale:?}; run `cargo run --example gen-docs` and commit the result"
    );
}

/// Flag names (`cap`, `max-queue`) defined in `-h` output: the lines that start with `--name`.
fn long_flags_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .map(|line| line.strip_prefix("-h, ").unwrap_or(line))
        .filter_map(|line| line.strip_prefix("--"))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

fn flags_in_reference(reference: &str) -> BTreeSet<String> {
    reference
        .lines()
        .filter_map(|line| line.strip_prefix("### `-"))
        .filter_map(|rest| rest.strip_suffix('`'))
        .map(str::to_string)
        .collect()
}

#[test]
fn reference_lists_exactly_the_flags_of_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_concert"))
        .arg("-h")
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut from_help = long_flags_in_help(&String::from_utf8_lossy(&out.stdout));
    from_help.remove("help");
    assert!(from_help.contains("cap") && from_help.contains("data-dir"));
    let reference = std::fs::read_to_string(Path::new(ROOT).join("docs/reference.md")).unwrap();
    assert_eq!(flags_in_reference(&reference), from_help);
}

#[test]
fn readme_table_sits_between_its_markers() {
    let spliced = render::splice_readme(
        "a\n<!-- flags:start -->\nold\n<!-- flags:end -->\nb\n",
        "new\n",
    )
    .unwrap();
    assert_eq!(
        spliced,
        "a\n<!-- flags:start -->\nnew\n<!-- flags:end -->\nb\n"
    );
    assert!(render::splice_readme("no markers", "x").is_err());
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    assert!(readme.contains("| `-cap` | `CONCERT_CAPACITY` | `434` |"));
}

#[test]
fn man_page_and_completions_name_every_flag() {
    let man = render::man_page().unwrap();
    assert!(man.contains("\n.TH concert 1 "), "{}", &man[..200]);
    let bash = render::completion(clap_complete::Shell::Bash).unwrap();
    for def in concert::config::SETTINGS {
        let name = def.flag_name();
        assert!(
            man.contains(&name.replace('-', "\\-")),
            "man page lacks {name}"
        );
        assert!(
            bash.contains(&format!("--{name}")),
            "bash completion lacks {name}"
        );
    }
}

/// The paths named in the first column of the README's module map.
fn module_map_paths(readme: &str) -> Vec<String> {
    let start = readme
        .find("<!-- modules:start -->")
        .expect("README has a module map");
    let end = readme[start..]
        .find("<!-- modules:end -->")
        .expect("module map ends")
        + start;
    readme[start..end]
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|row| row.split(" | ").next())
        .flat_map(|cell| cell.split(", "))
        .filter_map(|name| name.trim().strip_prefix('`')?.strip_suffix('`'))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_module_map_names_every_part_of_src_and_nothing_else() {
    let root = Path::new(ROOT);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let named = module_map_paths(&readme);
    for path in &named {
        assert!(
            root.join(path.trim_end_matches('/')).exists(),
            "the README's module map names {path}, which does not exist"
        );
    }
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let shown = if entry.file_type().unwrap().is_dir() {
            format!("src/{name}/")
        } else {
            format!("src/{name}")
        };
        assert!(
            named.contains(&shown),
            "{shown} is missing from the README's module map"
        );
    }
}

/// Relative links and pictures in the README and the guides point at files that exist, so a
/// moved document or a screenshot left out of a commit shows here rather than as a broken page.
#[test]
fn relative_links_in_the_docs_lead_somewhere() {
    let root = Path::new(ROOT);
    for document in ["README.md", "docs/operations.md", "docs/performance.md"] {
        let text = std::fs::read_to_string(root.join(document)).unwrap();
        let base = root.join(document).parent().unwrap().to_path_buf();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            assert!(
                base.join(target).exists(),
                "{document} links to {target}, which does not exist"
            );
        }
    }
}
