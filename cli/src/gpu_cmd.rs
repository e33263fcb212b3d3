//! `rulka gpu check`: what the GPU paths need, what is present, what is
//! missing and the command that installs each; then a decision of the
//! network on each asked-for provider, compared with the CPU's.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rulka_config::{Config, Provider};
use rulka_inference::native::{self, GpuFacts, Group, Missing};
use rulka_inference::{EngineOptions, ModelSource, PolicyEngine};

/// Options of `rulka gpu check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// Which providers to try: cuda, tensorrt or all.
    #[arg(long, default_value = "cuda", value_parser = ["cuda", "tensorrt", "all"])]
    provider: String,
    /// Config shaping the network tried (default: the built-in defaults,
    /// the original's network).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also write the findings as JSON (`-`: standard output only).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One provider's verdict.
#[derive(Debug, Clone, serde::Serialize)]
struct Verdict {
    provider: &'static str,
    works: bool,
    missing: Vec<(String, String)>,
    /// Largest |GPU − CPU| over the decision's logits and value.
    max_difference: Option<f32>,
    session_seconds: Option<f64>,
    cuda_graph: Option<bool>,
    error: Option<String>,
}

pub(crate) fn check(args: &CheckArgs, ort_lib: Option<&Path>) -> anyhow::Result<()> {
    let providers: Vec<Provider> = match args.provider.as_str() {
        "tensorrt" => vec![Provider::Tensorrt],
        "all" => vec![Provider::Cuda, Provider::Tensorrt],
        _ => vec![Provider::Cuda],
    };
    let cfg = match &args.config {
        Some(p) => crate::load_config(p)?,
        None => Config::default(),
    };
    let loaded = rulka_inference::load_runtime(ort_lib);
    let facts = native::gpu_facts();
    let learner = learner_info();
    let json = args.json.as_deref() == Some(Path::new("-"));
    let mut out: Box<dyn std::io::Write> =
        if json { Box::new(std::io::sink()) } else { Box::new(std::io::stdout()) };
    let w = &mut out;
    writeln!(
        w,
        "rulka gpu check — rulka {}; rulka-torch {}",
        native::VERSION,
        learner.as_ref().map_or_else(|e| e.clone(), |l| l.summary())
    )?;
    for line in fact_lines(&facts) {
        writeln!(w, "  {line}")?;
    }
    let mut verdicts = Vec::new();
    for &provider in &providers {
        let v = verdict(provider, &facts, &loaded, &cfg);
        for line in report(&v, &cfg.network_hash()) {
            writeln!(w, "{line}")?;
        }
        verdicts.push(v);
    }
    let all_work = all_work(&verdicts);
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "build": native::BuildFeatures::THIS.label(),
            "onnxruntime": facts.ort_library,
            "onnxruntime_gpu_build": facts.ort_is_gpu_build,
            "driver": facts.driver.as_ref().err(),
            "gpus": facts.gpus,
            "pieces": facts.pieces.iter().map(|p| serde_json::json!({"name": p.name, "group": format!("{:?}", p.group), "found": p.found})).collect::<Vec<_>>(),
            "learner": learner.as_ref().ok().map(|l| &l.json),
            "providers": verdicts,
        });
        let text = serde_json::to_string_pretty(&doc)?;
        if json {
            println!("{text}");
        } else {
            std::fs::write(path, text)?;
        }
    }
    if all_work {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "{} cannot run here (what is missing and the command that installs it are listed above)",
            providers.iter().map(|&p| native::provider_name(p)).collect::<Vec<_>>().join(" and ")
        ))
    }
}

/// Whether `rulka gpu check` exits 0: every provider asked for works.
fn all_work(verdicts: &[Verdict]) -> bool {
    !verdicts.is_empty() && verdicts.iter().all(|v| v.works)
}

/// A provider's lines of the report: that it works and how well, or what
/// is missing with each fix; ONNX Runtime's own words when nothing known
/// to be missing explains the failure (otherwise they are in the JSON).
fn report(v: &Verdict, network: &str) -> Vec<String> {
    let name = v.provider;
    if v.works {
        return vec![format!(
            "provider {name}: works — a decision of the network ({network}) within {:.1e} of the CPU's; session ready in {:.2} s{}",
            v.max_difference.unwrap_or(f32::NAN),
            v.session_seconds.unwrap_or(f64::NAN),
            if v.cuda_graph == Some(true) { ", replaying a CUDA graph" } else { "" }
        )];
    }
    let mut lines = vec![format!("provider {name}: does not work")];
    for (what, fix) in &v.missing {
        lines.push(format!("  - {what}\n    fix: {fix}"));
    }
    if let Some(e) = v.error.as_ref().filter(|_| v.missing.is_empty()) {
        lines.push(format!("  - {e}"));
    }
    lines
}

fn fact_lines(f: &GpuFacts) -> Vec<String> {
    let mut lines = vec![match &f.driver {
        Ok(()) if f.gpus.is_empty() => {
            "NVIDIA driver  libcuda.so.1 loads, but nvidia-smi -L lists no GPU".to_string()
        }
        Ok(()) => format!("NVIDIA driver  ok: {}", f.gpus.join("; ")),
        Err(e) => format!("NVIDIA driver  missing: {e}"),
    }];
    lines.push(match &f.ort_library {
        Some(p) => format!(
            "ONNX Runtime   {} ({})",
            p.display(),
            if f.ort_is_gpu_build { "the GPU build" } else { "the CPU build: no GPU providers" }
        ),
        None => "ONNX Runtime   not found".into(),
    });
    for group in [Group::Cuda, Group::Cudnn, Group::Tensorrt] {
        let of: Vec<_> = f.pieces.iter().filter(|p| p.group == group).collect();
        let found: Vec<_> = of.iter().filter_map(|p| p.found.as_ref()).collect();
        let label = match group {
            Group::Cuda => "CUDA 13      ",
            Group::Cudnn => "cuDNN 9      ",
            _ => "TensorRT 10  ",
        };
        let dirs: std::collections::BTreeSet<_> =
            found.iter().filter_map(|p| p.parent()).map(|d| d.display().to_string()).collect();
        let missing: Vec<_> = of.iter().filter(|p| p.found.is_none()).map(|p| p.name).collect();
        lines.push(if missing.is_empty() {
            format!(
                "{label}  {} of {} ({})",
                found.len(),
                of.len(),
                dirs.into_iter().collect::<Vec<_>>().join(", ")
            )
        } else {
            format!("{label}  {} of {}; missing {}", found.len(), of.len(), missing.join(", "))
        });
    }
    lines
}

fn verdict(
    provider: Provider,
    facts: &GpuFacts,
    loaded: &Result<rulka_inference::Runtime, rulka_inference::InferenceError>,
    cfg: &Config,
) -> Verdict {
    let missing: Vec<Missing> = native::missing_for(provider, facts);
    let mut v = Verdict {
        provider: native::provider_name(provider),
        works: false,
        missing: missing.iter().map(|m| (m.what.clone(), m.fix.clone())).collect(),
        max_difference: None,
        session_seconds: None,
        cuda_graph: None,
        error: None,
    };
    let rt = match loaded {
        Ok(rt) => *rt,
        Err(e) => {
            v.error = Some(e.to_string());
            return v;
        }
    };
    // The decision is tried whatever the files say: the loader may find a
    // system-wide install, and when it does not its own words are shown.
    match try_decision(rt, provider, cfg) {
        Ok((diff, secs, graph)) => {
            v.works = true;
            v.missing.clear();
            (v.max_difference, v.session_seconds, v.cuda_graph) =
                (Some(diff), Some(secs), Some(graph));
        }
        Err(e) => {
            v.error = Some(format!("the decision on {}: {e}", native::provider_name(provider)))
        }
    }
    v
}

/// One decision of `cfg`'s network (small deterministic weights) on
/// `provider` and on the CPU: the largest difference of their logits and
/// values (an error beyond [`rulka_inference::gate::bound`]), the seconds the GPU engine took to be ready, and whether it
/// replays a CUDA graph.
fn try_decision(
    rt: rulka_inference::Runtime,
    provider: Provider,
    cfg: &Config,
) -> Result<(f32, f64, bool), String> {
    let arch = rulka_network::Architecture::from_config(cfg);
    let mut weights = rulka_checkpoint::Weights::zeros(&arch);
    weights.fill_deterministic(0x5eed);
    let onnx = rulka_export::export_onnx(cfg, &weights).map_err(|e| e.to_string())?;
    let mut gpu_cfg = cfg.clone();
    gpu_cfg.inference.provider = provider;
    gpu_cfg.inference.fallback = rulka_config::Fallback::None;
    gpu_cfg.inference.weights = rulka_config::WeightFormat::Fp32;
    let mut cpu_cfg = gpu_cfg.clone();
    cpu_cfg.inference.provider = Provider::Cpu;
    let opts = EngineOptions { greedy: true, seed: 0 };
    let t0 = Instant::now();
    let mut gpu = PolicyEngine::new(rt, &gpu_cfg, ModelSource::Bytes(onnx.clone()), 0, opts)
        .map_err(|e| e.to_string())?;
    let secs = t0.elapsed().as_secs_f64();
    let mut cpu = PolicyEngine::new(rt, &cpu_cfg, ModelSource::Bytes(onnx), 0, opts)
        .map_err(|e| e.to_string())?;
    let (pixels, f) = gpu.input_sizes();
    let (mean, std) = rulka_config::float_inputs_mean_std(cfg);
    let frame: Vec<u8> = (0..pixels).map(|i| (i * 37 % 251) as u8).collect();
    let floats: Vec<f32> =
        (0..f).map(|i| mean[i] + std[i] * ((i * 13 % 7) as f32 / 3.5 - 1.0)).collect();
    let (g, c) = (
        gpu.outputs(&frame, &floats).map_err(|e| e.to_string())?,
        cpu.outputs(&frame, &floats).map_err(|e| e.to_string())?,
    );
    // The TensorRT gate's bound (TF32 arithmetic, or fp16 kernels); CUDA's
    // fp32 is far closer, so a provider beyond it computes something else.
    let fp16 = provider == Provider::Tensorrt && cfg.inference.tensorrt_fp16;
    let diff = rulka_inference::gate::check(&g, &c, rulka_inference::gate::bound(fp16))?;
    Ok((diff, secs, gpu.stats().cuda_graph))
}

/// What `rulka-torch gpu-info` says of libtorch's CUDA.
struct LearnerInfo {
    json: serde_json::Value,
}

impl LearnerInfo {
    fn summary(&self) -> String {
        let build = self.json["build"].as_str().unwrap_or("?");
        match (self.json["cuda_available"].as_bool(), self.json["devices"].as_u64()) {
            (Some(true), Some(n)) => format!("{build}: libtorch sees {n} CUDA device(s)"),
            _ if build == "cpu" => format!(
                "{build}: the learner trains on the CPU (scripts/rulka --build=cuda for the GPU)"
            ),
            _ => format!("{build}: libtorch sees no CUDA device"),
        }
    }
}

fn learner_info() -> Result<LearnerInfo, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let torch = exe.with_file_name("rulka-torch");
    let o = std::process::Command::new(&torch)
        .arg("gpu-info")
        .output()
        .map_err(|e| format!("not checked ({}: {e})", torch.display()))?;
    if !o.status.success() {
        return Err(format!(
            "not checked ({} gpu-info failed: {})",
            torch.display(),
            String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
        ));
    }
    serde_json::from_slice(&o.stdout)
        .map(|json| LearnerInfo { json })
        .map_err(|e| format!("not checked ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(works: bool, missing: &[(&str, &str)], error: Option<&str>) -> Verdict {
        Verdict {
            provider: "CUDA",
            works,
            missing: missing.iter().map(|(w, f)| (w.to_string(), f.to_string())).collect(),
            max_difference: works.then_some(3e-6),
            session_seconds: works.then_some(0.5),
            cuda_graph: works.then_some(true),
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn the_check_passes_only_when_every_provider_asked_for_works() {
        let (ok, bad) = (verdict(true, &[], None), verdict(false, &[("x", "y")], None));
        for (vs, want) in [
            (vec![], false),
            (vec![ok.clone()], true),
            (vec![bad.clone()], false),
            (vec![ok.clone(), ok.clone()], true),
            (vec![ok.clone(), bad.clone()], false),
            (vec![bad.clone(), ok.clone()], false),
        ] {
            assert_eq!(all_work(&vs), want, "{:?}", vs.iter().map(|v| v.works).collect::<Vec<_>>());
        }
    }

    #[test]
    fn onnx_runtimes_words_are_shown_when_nothing_known_explains_the_failure() {
        let unexplained = report(&verdict(false, &[], Some("CUDA failure 999: odd")), "n");
        assert_eq!(
            unexplained,
            vec!["provider CUDA: does not work".to_string(), "  - CUDA failure 999: odd".into()]
        );
        let explained = report(
            &verdict(false, &[("libcuda.so.1 missing", "install the driver")], Some("the words")),
            "n",
        );
        assert_eq!(explained.len(), 2, "{explained:?}");
        assert!(
            explained[1].contains("libcuda.so.1 missing")
                && explained[1].contains("fix: install the driver")
        );
        let works = report(&verdict(true, &[], None), "abc");
        assert_eq!(works.len(), 1);
        assert!(
            works[0].starts_with("provider CUDA: works")
                && works[0].contains("(abc)")
                && works[0].contains("CUDA graph"),
            "{works:?}"
        );
    }
}
