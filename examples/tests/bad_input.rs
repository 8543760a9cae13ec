//! A model directory that is missing, incomplete or of an unsupported configuration is an error
//! naming the file and the field, never a panic. (No checkpoint needed.)

use std::path::PathBuf;

use examples::{BertConfig, Model};
use kernels::Kernels;

/// A fresh directory under the target directory's temporary space.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const CONFIG: &str = r#"{"hidden_act": "gelu", "hidden_size": 8, "num_attention_heads": 2,
  "intermediate_size": 16, "num_hidden_layers": 1, "max_position_embeddings": 16,
  "vocab_size": 10, "layer_norm_eps": 1e-12}"#;

fn load_error(dir: &std::path::Path) -> String {
    match Model::load(dir, Kernels::best()) {
        Ok(_) => panic!("{}: accepted", dir.display()),
        Err(err) => err.0,
    }
}

#[test]
fn a_missing_directory_names_config_json() {
    let msg = load_error(&scratch_dir("missing").join("nothing-here"));
    assert!(msg.contains("config.json"), "{msg}");
}

#[test]
fn unsupported_configurations_name_the_field() {
    let dir = scratch_dir("configs");
    let path = dir.join("config.json");
    for (edit, field) in [
        (CONFIG.replace(r#""gelu""#, r#""relu""#), "hidden_act"),
        (
            CONFIG.replace(r#""num_attention_heads": 2"#, r#""num_attention_heads": 3"#),
            "hidden_size",
        ),
        (CONFIG.replace("1e-12", "-1"), "layer_norm_eps"),
        (CONFIG.replace(r#""vocab_size": 10,"#, ""), "vocab_size"),
        ("{ not json".to_string(), "config.json"),
    ] {
        std::fs::write(&path, edit).unwrap();
        let Err(err) = BertConfig::from_file(&path) else {
            panic!("{field}: accepted");
        };
        let msg = err.0;
        assert!(msg.contains(field) && msg.contains("config.json"), "{field}: {msg}");
    }
}

#[test]
fn a_directory_without_weights_names_the_missing_file() {
    let dir = scratch_dir("no-weights");
    std::fs::write(dir.join("config.json"), CONFIG).unwrap();
    let msg = load_error(&dir);
    // The pooling configuration, the tokenizer or the weights: whichever is looked for first.
    assert!(
        ["modules.json", "1_Pooling", "tokenizer.json", "model.safetensors"]
            .iter()
            .any(|f| msg.contains(f)),
        "{msg}"
    );
}
