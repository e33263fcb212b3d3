//! `rulka hf-vit`: a freshly initialised Hugging Face ViT folder
//! (`config.json`, `preprocessor_config.json`, `model.safetensors`), for a
//! Variant B or C network that should start from scratch rather than from a
//! pretrained model — e.g. on the simulator, with no download.

use std::path::PathBuf;

use anyhow::Context as _;
use rulka_checkpoint::Weights;
use rulka_config::Config;
use rulka_learner::ActorCritic;
use tch::Device;

use crate::BadInput;

/// Options of `rulka hf-vit`.
#[derive(clap::Args, Debug)]
pub struct HfVitArgs {
    /// Folder to create (must not exist, or be empty).
    #[arg(short, long)]
    pub out: PathBuf,
    /// Token width.
    #[arg(long, default_value_t = 64)]
    pub hidden: u32,
    /// Encoder layers.
    #[arg(long, default_value_t = 2)]
    pub layers: u32,
    /// Attention heads (must divide --hidden).
    #[arg(long, default_value_t = 4)]
    pub heads: u32,
    /// Feed-forward width (default 4 × hidden).
    #[arg(long)]
    pub intermediate: Option<u32>,
    /// Input side in pixels (the network's frames are resized to it).
    #[arg(long, default_value_t = 32)]
    pub image: u32,
    /// Patch side (must divide --image).
    #[arg(long, default_value_t = 8)]
    pub patch: u32,
    /// Initialisation seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Writes the folder: the shape files, then Hugging Face's initialisation
/// (weights `N(0, 0.02²)` truncated at 2σ, zero biases, unit LayerNorms)
/// saved as `transformers` saves a model.
pub fn vit(a: &HfVitArgs) -> anyhow::Result<()> {
    if a.heads == 0 || a.hidden % a.heads != 0 {
        return Err(BadInput(format!(
            "--hidden {} is not divisible by --heads {}",
            a.hidden, a.heads
        ))
        .into());
    }
    if a.patch == 0 || a.image % a.patch != 0 {
        return Err(
            BadInput(format!("--patch {} does not divide --image {}", a.patch, a.image)).into()
        );
    }
    if a.out.exists() && std::fs::read_dir(&a.out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(
            BadInput(format!("{}: exists and is not an empty folder", a.out.display())).into()
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let config = serde_json::json!({
        "model_type": "vit", "architectures": ["ViTModel"],
        "hidden_size": a.hidden, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "intermediate_size": a.intermediate.unwrap_or(4 * a.hidden), "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "image_size": a.image, "patch_size": a.patch, "num_channels": 3, "qkv_bias": true,
    });
    let processor = serde_json::json!({
        "image_processor_type": "ViTImageProcessor", "do_resize": true, "do_rescale": true,
        "do_normalize": true, "size": {"height": a.image, "width": a.image},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    });
    let write = |name: &str, v: &serde_json::Value| -> anyhow::Result<()> {
        let p = a.out.join(name);
        std::fs::write(&p, serde_json::to_string_pretty(v)?)
            .with_context(|| format!("writing {}", p.display()))
    };
    write("config.json", &config)?;
    write("preprocessor_config.json", &processor)?;
    // A Variant B network around this folder; its `backbone.` tensors are the ViT.
    let yaml = format!(
        "nn: {{vis: {{transformer: {{use_hf_backbone: true, model_name_or_path: '{}', d_model: 32, n_layers: 0}}}}}}",
        a.out.display()
    );
    let cfg = Config::from_yaml_str(&yaml, "hf-vit").map_err(|e| BadInput(e.to_string()))?;
    let net = ActorCritic::new(&cfg, Device::Cpu, a.seed);
    let mut vit = Weights::default();
    for (name, t) in net.to_weights().tensors {
        if let Some(key) = name.strip_prefix("backbone.") {
            vit.tensors.insert(key.to_string(), t);
        }
    }
    let n: usize = vit.tensors.values().map(|t| t.data.len()).sum();
    vit.write_pt(&a.out.join("model.safetensors"))?;
    println!(
        "wrote {}: ViT {}x{} patch {} hidden {} x{} layers {} heads, {n} parameters (freshly initialised)",
        a.out.display(), a.image, a.image, a.patch, a.hidden, a.layers, a.heads
    );
    Ok(())
}
