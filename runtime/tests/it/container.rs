//! The container files, checked without a Docker engine (none runs here):
//! what the Dockerfile copies exists, images are pinned, the image runs as a
//! non-root user with /data as a volume and a /health check, and env.example
//! names every variable the node and init.sh read.

use std::collections::BTreeSet;

use lite_node_testkit::workspace_root;

fn read(rel: &str) -> String {
    std::fs::read_to_string(workspace_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_dockerfile_copies_what_exists_pins_its_images_and_runs_unprivileged() {
    let docker = read("Dockerfile");
    let lines: Vec<&str> = docker.lines().map(str::trim).collect();
    for line in lines.iter().filter(|l| l.starts_with("COPY") && !l.contains("--from=")) {
        let words: Vec<&str> = line.split_whitespace().filter(|w| !w.starts_with("--")).skip(1).collect();
        for src in &words[..words.len() - 1] {
            assert!(workspace_root().join(src).exists(), "Dockerfile copies `{src}`, which is not in the checkout");
        }
    }
    let image = lines.iter().find_map(|l| l.strip_prefix("ARG RUST_IMAGE=")).expect("the base image is an ARG");
    let tag = image.split(':').nth(1).expect("a tag");
    assert!(tag.chars().next().is_some_and(|c| c.is_ascii_digit()) && tag.matches('.').count() == 2, "pinned: {image}");
    for from in lines.iter().filter(|l| l.starts_with("FROM")) {
        assert!(from.contains("${RUST_IMAGE}") && !from.contains("latest"), "{from}");
    }
    let user = lines.iter().rev().find_map(|l| l.strip_prefix("USER ")).expect("a USER");
    assert_ne!(user, "root");
    assert!(lines.iter().any(|l| l.starts_with("VOLUME") && l.contains("/data")));
    assert!(docker.contains("HEALTHCHECK") && docker.contains("/health"));
    assert!(lines.contains(&r#"ENTRYPOINT ["/app/init.sh"]"#));
    assert!(docker.contains("LITE_NODE_DATA_DIR=/data"));
    let ignore = read(".dockerignore");
    for dir in ["target", "devnet/node_modules", ".git"] {
        assert!(ignore.lines().any(|l| l == dir), ".dockerignore leaves out {dir}");
    }
}

#[test]
fn compose_runs_the_node_and_its_own_collector_from_the_env_file() {
    let compose = read("docker-compose.yaml");
    assert!(compose.contains("\n  collector:\n") && compose.contains("\n  lite-node:\n"), "{compose}");
    assert!(!compose.contains("ghcr.io") && !compose.contains("powerloom/"), "no image of the wound-down network");
    assert!(compose.contains(r#"entrypoint: ["lite-node", "collector"]"#), "the collector is this image's");
    assert!(compose.contains("--p2p-bootstrap=${VALIDATOR_PEERS:?"), "the validators to publish to are required");
    assert_eq!(compose.matches("env_file: .env").count(), 1, "only the node reads the whole .env");
    let collector = compose.split("\n  lite-node:\n").next().unwrap();
    assert!(
        !collector.contains("TELEGRAM") && !collector.contains("PRIVATE_KEY"),
        "keys and tokens stay with the node"
    );
    assert!(compose.contains("LOCAL_COLLECTOR_HOST: collector"));
    assert!(compose.contains("lite-node-data:/data"));
}

/// Every `"NAME"` the configuration code reads.
fn variables_read() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    // The config crate is the only code that reads the environment (clippy's
    // disallowed-methods holds the rest to it): every file of it.
    let dir = workspace_root().join("runtime/crates/config/src");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    files.sort();
    assert!(files.len() > 10, "the config crate's files: {files:?}");
    for file in files {
        let text = read(&format!("runtime/crates/config/src/{}", file.to_string_lossy()));
        for piece in text.split('"').skip(1).step_by(2) {
            let is_name = piece.len() > 3
                && piece.contains('_')
                && piece.bytes().all(|b| b.is_ascii_uppercase() || b == b'_' || b.is_ascii_digit());
            // A name ending in `_` is a prefix (the variables a devnet's
            // children inherit), not a variable of its own.
            if is_name && piece != "CARGO_MANIFEST_DIR" && !piece.ends_with('_') {
                names.insert(piece.to_owned());
            }
        }
    }
    for line in read("init.sh").lines() {
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("LITE_NODE_RESTART_") || word == "LITE_NODE_BIN" {
                names.insert(word.to_owned());
            }
        }
    }
    names
}

#[test]
fn env_example_names_every_variable_the_node_and_init_sh_read() {
    let example = read("env.example");
    let listed: BTreeSet<&str> = example
        .lines()
        .filter_map(|l| l.trim_start_matches('#').trim().split_once('=').map(|(k, _)| k.trim()))
        .collect();
    let read = variables_read();
    assert!(read.len() > 40, "found the variables: {read:?}");
    let missing: Vec<&String> = read.iter().filter(|v| !listed.contains(v.as_str())).collect();
    assert!(missing.is_empty(), "env.example does not list {missing:?}");
    for required in lite_node::config::REQUIRED {
        let line = example.lines().find(|l| l.starts_with(&format!("{required}="))).unwrap_or_default();
        assert!(!line.is_empty(), "required {required} is set (uncommented) in env.example");
    }
}
