//! Hugging Face tensor names as llama.cpp names them in GGUF files: layers as `blk.N`,
//! experts as slices of one 3-D tensor per projection, the prediction head as the block after
//! the model's.

use std::collections::HashMap;

/// `model.layers.3.self_attn.q_proj.weight` → `blk.3.attn_q.weight`.
pub fn gguf_name(hf: &str) -> String {
    gguf_tensor(hf).0
}

/// The GGUF tensor holding `hf`, and the expert it is a slice of: llama.cpp stores a layer's
/// experts as one 3-D tensor per projection, `model.layers.3.mlp.experts.7.up_proj.weight` →
/// expert 7 of `blk.3.ffn_up_exps.weight`.
pub(super) fn gguf_tensor(hf: &str) -> (String, Option<usize>) {
    let expert = hf.strip_prefix("model.layers.").and_then(|rest| {
        let (layer, rest) = rest.split_once(".mlp.experts.")?;
        let (e, rest) = rest.split_once('.')?;
        let kind = match rest {
            "gate_proj.weight" => "ffn_gate_exps",
            "up_proj.weight" => "ffn_up_exps",
            "down_proj.weight" => "ffn_down_exps",
            _ => return None,
        };
        let (layer, e) = (layer.parse::<usize>().ok()?, e.parse::<usize>().ok()?);
        Some((format!("blk.{layer}.{kind}.weight"), e))
    });
    match expert {
        Some((name, e)) => (name, Some(e)),
        None => (layer_name(hf), None),
    }
}

/// The multi-token-prediction head's tensor `mtp.{rest}` in llama.cpp's layout: its decoder
/// layer as block `block`, the rest as that block's `nextn.*`.
pub(super) fn mtp_tensor(rest: &str, block: usize) -> (String, Option<usize>) {
    if let Some(layer) = rest.strip_prefix("layers.0.") {
        return gguf_tensor(&format!("model.layers.{block}.{layer}"));
    }
    let nextn = match rest {
        "fc.weight" => "eh_proj",
        "pre_fc_norm_embedding.weight" => "enorm",
        "pre_fc_norm_hidden.weight" => "hnorm",
        "norm.weight" => "shared_head_norm",
        other => return (format!("mtp.{other}"), None),
    };
    (format!("blk.{block}.nextn.{nextn}.weight"), None)
}

fn layer_name(hf: &str) -> String {
    let fixed: HashMap<&str, &str> = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ]
    .into_iter()
    .collect();
    if let Some(n) = fixed.get(hf) {
        return (*n).to_string();
    }
    let Some(rest) = hf.strip_prefix("model.layers.") else {
        return hf.to_string();
    };
    let Some((layer, rest)) = rest.split_once('.') else {
        return hf.to_string();
    };
    // Gated DeltaNet parameters without a `.weight` (llama.cpp keeps -exp(A_log) as `ssm_a`).
    match rest {
        "linear_attn.A" => return format!("blk.{layer}.ssm_a"),
        "linear_attn.dt_bias" => return format!("blk.{layer}.ssm_dt.bias"),
        _ => {}
    }
    let (module, suffix) = match rest.rsplit_once('.') {
        Some(x) => x,
        None => return hf.to_string(),
    };
    let mapped = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate" => "ffn_gate_inp",
        "mlp.shared_expert.gate_proj" => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" => "ffn_down_shexp",
        "mlp.shared_expert_gate" => "ffn_gate_inp_shexp",
        "linear_attn.in_proj_qkv" => "attn_qkv",
        "linear_attn.in_proj_z" => "attn_gate",
        "linear_attn.in_proj_b" => "ssm_beta",
        "linear_attn.in_proj_a" => "ssm_alpha",
        "linear_attn.conv1d" => "ssm_conv1d",
        "linear_attn.norm" => "ssm_norm",
        "linear_attn.out_proj" => "ssm_out",
        other => other,
    };
    format!("blk.{layer}.{mapped}.{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_hugging_face_names_to_gguf() {
        assert_eq!(gguf_name("model.embed_tokens.weight"), "token_embd.weight");
        assert_eq!(
            gguf_name("model.layers.11.self_attn.q_proj.bias"),
            "blk.11.attn_q.bias"
        );
        assert_eq!(
            gguf_name("model.layers.0.mlp.down_proj.weight"),
            "blk.0.ffn_down.weight"
        );
        assert_eq!(
            gguf_name("model.layers.2.self_attn.k_norm.weight"),
            "blk.2.attn_k_norm.weight"
        );
        assert_eq!(
            gguf_name("model.layers.2.post_attention_layernorm.weight"),
            "blk.2.ffn_norm.weight"
        );
        assert_eq!(gguf_name("lm_head.weight"), "output.weight");
        assert_eq!(
            gguf_name("model.layers.4.mlp.gate.weight"),
            "blk.4.ffn_gate_inp.weight"
        );
        assert_eq!(
            gguf_tensor("model.layers.4.mlp.experts.17.down_proj.weight"),
            ("blk.4.ffn_down_exps.weight".to_string(), Some(17))
        );
        assert_eq!(
            gguf_tensor("model.layers.0.mlp.experts.0.gate_proj.weight"),
            ("blk.0.ffn_gate_exps.weight".to_string(), Some(0))
        );
    }

    #[test]
    fn the_prediction_head_is_the_block_after_the_model() {
        assert_eq!(
            mtp_tensor("fc.weight", 24),
            ("blk.24.nextn.eh_proj.weight".to_string(), None)
        );
        assert_eq!(
            mtp_tensor("norm.weight", 24).0,
            "blk.24.nextn.shared_head_norm.weight"
        );
        assert_eq!(
            mtp_tensor("pre_fc_norm_hidden.weight", 24).0,
            "blk.24.nextn.hnorm.weight"
        );
        assert_eq!(
            mtp_tensor("layers.0.self_attn.q_proj.weight", 24).0,
            "blk.24.attn_q.weight"
        );
        assert_eq!(
            mtp_tensor("layers.0.mlp.experts.5.up_proj.weight", 40),
            ("blk.40.ffn_up_exps.weight".to_string(), Some(5))
        );
    }
}
