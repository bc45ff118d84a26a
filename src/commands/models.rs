//! `hearth models`: the built-in model cards.

use hearth_engine::ModelCard;

pub fn run() -> anyhow::Result<()> {
    println!(
        "{:<36} {:<40} {:<7} {:<11} DESCRIPTION",
        "NAME", "HUB ID", "FAMILY", "FORMAT"
    );
    for c in ModelCard::all()? {
        println!(
            "{:<36} {:<40} {:<7} {:<11} {}",
            c.name, c.hub_id, c.family, c.format, c.description
        );
    }
    println!(
        "\nUse a name with --model, e.g. `hearth run --model qwen2.5-0.5b-instruct \"Hello\"`."
    );
    Ok(())
}
