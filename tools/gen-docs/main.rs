//! Writes the generated documentation (reference, README flag table, man page, completions).
//! Run after changing a setting: `cargo run --example gen-docs`.

mod render;

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let outputs = match render::outputs(root) {
        Ok(outputs) => outputs,
        Err(error) => {
            eprintln!("gen-docs: {error}");
            return ExitCode::FAILURE;
        }
    };
    for output in outputs {
        let path = root.join(&output.path);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(output.contents.as_str()) {
            continue;
        }
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, &output.contents));
        if let Err(error) = written {
            eprintln!("gen-docs: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("updated {}", output.path.display());
    }
    ExitCode::SUCCESS
}
