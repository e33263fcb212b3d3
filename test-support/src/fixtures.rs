//! Files the tests of several crates make the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `config.json` of a ViT-Ti/16 (the shapes `configs/ppo-transformer.yaml`
/// names under `models/vit`).
pub const VIT_TI_16: &str = r#"{"model_type": "vit", "hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3, "intermediate_size": 768, "image_size": 224, "patch_size": 16}"#;

/// `config.json` of google/bert_uncased_L-2_H-128_A-2 (the preset's
/// `models/bert_uncased_L-2_H-128_A-2`).
pub const BERT_L2_H128: &str = r#"{"model_type": "bert", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 512, "vocab_size": 30522, "type_vocab_size": 2}"#;

/// Two Hugging Face model folders under `dir`, `vit/` and `bert/`, each
/// holding only the given `config.json` (what rulka reads of a model
/// folder to build the network's shapes); their paths.
pub fn hf_model_folders(dir: &Path, vit_config: &str, bert_config: &str) -> (PathBuf, PathBuf) {
    let (vit, bert) = (dir.join("vit"), dir.join("bert"));
    for (folder, config) in [(&vit, vit_config), (&bert, bert_config)] {
        std::fs::create_dir_all(folder).unwrap();
        std::fs::write(folder.join("config.json"), config).unwrap();
    }
    (vit, bert)
}

/// `configs/ppo-transformer.yaml`'s text with its two model folders made
/// under `dir` with the preset's shapes ([`VIT_TI_16`], [`BERT_L2_H128`]).
pub fn transformer_preset(dir: &Path) -> String {
    let (vit, bert) = hf_model_folders(dir, VIT_TI_16, BERT_L2_H128);
    std::fs::read_to_string(crate::workspace().join("configs/ppo-transformer.yaml"))
        .unwrap()
        .replace("models/vit", &vit.display().to_string())
        .replace("models/bert_uncased_L-2_H-128_A-2", &bert.display().to_string())
}

/// The simulator's `easy` tracks of seeds 0 and 1 exported by `rulka sim
/// export-map` (the `rulka` binary at `rulka`) into `dir` as
/// `track<seed>.npy` (kept when already there), as the YAML list items of
/// `environment.tmi.maps`: `{name: track0, map_path: '0', zone_centers: …}, …`.
pub fn sim_maps(rulka: &Path, dir: &Path) -> String {
    let mut maps = Vec::new();
    for seed in [0, 1] {
        let npy = dir.join(format!("track{seed}.npy"));
        if !npy.exists() {
            let o = Command::new(rulka)
                .args(["sim", "export-map", "--seed", &seed.to_string(), "--track", "easy", "-o"])
                .arg(&npy)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        maps.push(format!(
            "{{name: track{seed}, map_path: '{seed}', zone_centers: {}}}",
            npy.display()
        ));
    }
    maps.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_maps_exports_each_track_once_and_lists_them_as_map_lines() {
        let dir = tempfile::tempdir().unwrap();
        // A stand-in for `rulka`: logs its arguments, writes the `-o` file.
        let fake = dir.path().join("rulka");
        let log = dir.path().join("calls.log");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\nfor a; do out=$a; done\n: > \"$out\"\n",
                log.display()
            ),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&fake).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&fake, perms).unwrap();
        let d = dir.path().display();
        let want = format!(
            "{{name: track0, map_path: '0', zone_centers: {d}/track0.npy}}, {{name: track1, map_path: '1', zone_centers: {d}/track1.npy}}"
        );
        assert_eq!(sim_maps(&fake, dir.path()), want);
        let calls = || std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls(),
            format!("sim export-map --seed 0 --track easy -o {d}/track0.npy\nsim export-map --seed 1 --track easy -o {d}/track1.npy\n")
        );
        // Already there: not exported again.
        assert_eq!(sim_maps(&fake, dir.path()), want);
        assert_eq!(calls().lines().count(), 2);
    }

    #[test]
    fn the_model_folders_hold_the_given_configs() {
        let dir = tempfile::tempdir().unwrap();
        let (vit, bert) = hf_model_folders(dir.path(), "{\"a\": 1}", "{\"b\": 2}");
        assert_eq!(std::fs::read_to_string(vit.join("config.json")).unwrap(), "{\"a\": 1}");
        assert_eq!(std::fs::read_to_string(bert.join("config.json")).unwrap(), "{\"b\": 2}");
        let text = transformer_preset(dir.path());
        assert!(!text.contains("models/vit") && !text.contains("models/bert"), "{text}");
        assert!(text.contains(&vit.display().to_string()), "{text}");
        assert!(text.contains(&bert.display().to_string()), "{text}");
    }
}
