//! The container files: what the Dockerfile copies exists, images are
//! pinned, the image runs as a non-root user with /data as a volume and a
//! /health check, env.example names every variable the node and init.sh
//! read — and the image itself, built with podman and run as a slot's node.

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
        // `.prebuilt/` is made by whoever builds `--target runtime-prebuilt`.
        for src in words[..words.len() - 1].iter().filter(|s| !s.starts_with(".prebuilt/")) {
            assert!(workspace_root().join(src).exists(), "Dockerfile copies `{src}`, which is not in the checkout");
        }
    }
    let image = lines.iter().find_map(|l| l.strip_prefix("ARG RUST_IMAGE=")).expect("the base image is an ARG");
    let tag = image.split(':').nth(1).expect("a tag");
    assert!(tag.chars().next().is_some_and(|c| c.is_ascii_digit()) && tag.matches('.').count() == 2, "pinned: {image}");
    // Every FROM names the pinned image or a stage by its own name (buildah
    // does not resolve a stage named through an ARG).
    for from in lines.iter().filter(|l| l.starts_with("FROM")) {
        assert!(
            (from.contains("${RUST_IMAGE}") || from.starts_with("FROM base AS ")) && !from.contains("latest"),
            "{from}"
        );
        assert!(!from.contains("${") || from.starts_with("FROM ${RUST_IMAGE} AS "), "{from}");
    }
    // The image an operator builds (the last stage) and the drill's are the
    // same `base` with the same files from their binary stage: the drill
    // tests what operators run.
    let stages: Vec<&str> = docker.split("\nFROM ").skip(1).collect();
    let stage = |name: &str| {
        stages
            .iter()
            .find(|s| s.lines().next().unwrap().ends_with(&format!(" AS {name}")))
            .unwrap_or_else(|| panic!("no stage {name}"))
    };
    let copies = |s: &str, from: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("COPY --from="))
            .map(|l| l.replace(&format!("--from={from} "), "--from=BIN "))
            .collect()
    };
    assert!(stages.last().unwrap().starts_with("base AS runtime\n"), "the last stage is the operators' image");
    assert_eq!(copies(stage("runtime"), "builder"), copies(stage("runtime-prebuilt"), "prebuilt"));
    assert_eq!(copies(stage("runtime"), "builder").len(), 2, "the binary and the compute package's crates");
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
    // podman-compose 1.0 leaves `${VAR:-}` (an empty default) as it is.
    assert!(!compose.contains(":-}"), "an empty default podman-compose 1.0 does not substitute");
    // The node waits for its collector's health check, which asks the collector's /health.
    assert!(compose.contains("condition: service_healthy"), "{compose}");
    assert!(collector.contains("--status-listen=127.0.0.1:8003") && collector.contains("127.0.0.1:8003/health"));
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

/// `podman`, run to the end; its stdout, or a panic naming the command and
/// what it printed.
/// `poll_until` at a podman pace: each `podman` command costs a tenth of a
/// second of CPU or more (its storage read at start), so the checks that
/// run one are made once a second, not every 200 ms, which on two cores
/// took CPU from the tests beside this one.
fn poll_podman<T>(what: &str, timeout: std::time::Duration, check: impl FnMut() -> Option<T>) -> T {
    lite_node_testkit::poll_every(what, timeout, std::time::Duration::from_secs(1), check)
}

fn podman(args: &[&str]) -> String {
    let out = std::process::Command::new("podman").args(args).output().unwrap_or_else(|e| {
        panic!("podman: {e} (`./init.sh test` installs it and builds the offline base: devnet/container-base.sh)")
    });
    assert!(
        out.status.success(),
        "podman {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The drill's container, volume and image, removed however the test ends.
struct Drill {
    name: String,
    volume: String,
    image: String,
}

impl Drop for Drill {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = std::process::Command::new("podman").args(args).output();
        };
        quiet(&["rm", "-f", "-t", "0", &self.name]);
        quiet(&["volume", "rm", "-f", &self.volume]);
        quiet(&["rmi", "-f", &self.image]);
        // The build's intermediate stages, untagged.
        quiet(&["image", "prune", "-f"]);
    }
}

/// The image, built from this checkout with podman (the runtime stage as
/// shipped, around the binary the suite built), run as an operator runs it
/// for slot 2 of the devnet with the image's own compute package: it builds
/// the package once, turns healthy and submits; `podman stop` mid-epoch ends it within its grace, and the
/// restart on the same volume is healthy without a rebuild, sending nothing
/// twice; with the collector gone the image's own health check fails; a
/// node killed inside ends its container at once; no key in `podman logs`.
#[test]
fn the_image_runs_a_slot_stops_within_its_grace_restarts_warm_and_reports_trouble() {
    use std::time::{Duration, Instant};

    use lite_node_testkit::{RunningCollector, World, node_env, poll_until};

    let root = workspace_root();
    let ctx = tempfile::tempdir().unwrap();
    for file in ["Dockerfile", "init.sh", "projects.json", "env.example"] {
        std::fs::copy(root.join(file), ctx.path().join(file)).unwrap();
    }
    for dir in ["plugin-api", "computes"] {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "tar -C '{}' --exclude=target -cf - {dir} | tar -C '{}' -xf -",
                root.display(),
                ctx.path().display()
            ))
            .status()
            .unwrap();
        assert!(status.success(), "copying {dir}");
    }
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lite-node"));
    std::fs::create_dir_all(ctx.path().join(".prebuilt")).unwrap();
    let prebuilt = ctx.path().join(".prebuilt/lite-node");
    std::fs::copy(bin, &prebuilt).unwrap();
    // Debug info is the suite's, not the image's.
    let _ = std::process::Command::new("strip").arg(&prebuilt).status();

    let name = format!("lite-node-drill-{}", std::process::id());
    // The volume the compose drill's node takes over (as an operator moving
    // from `docker run` to compose keeps theirs): its package is built once.
    let project = format!("lite-node-compose-{}", std::process::id());
    let volume_name = format!("{project}_lite-node-data");
    let drill = Drill { name: name.clone(), volume: volume_name.clone(), image: format!("localhost/{name}") };
    let started = Instant::now();
    podman(&[
        "build",
        "--quiet",
        "--format",
        "docker",
        "--network",
        "host",
        "--pull=never",
        "--target",
        "runtime-prebuilt",
        "-t",
        &drill.image,
        ctx.path().to_str().unwrap(),
    ]);
    let size: u64 = podman(&["image", "inspect", "--format", "{{.Size}}", &drill.image]).trim().parse().unwrap();
    println!("image built in {:.0} s: {} MB", started.elapsed().as_secs_f64(), size / 1_000_000);

    // The devnet: the chain, the project's collector, a published package.
    let world = World::load();
    let host_env = node_env(&world.url(), &world.manifest, 2);
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (collector_port, status_port) = (free(), free());
    let collector = RunningCollector::start_with(bin, &host_env, collector_port, &[]);
    let key = world.manifest.signer_key(2).trim_start_matches("0x").to_owned();
    let keep = [
        "SOURCE_RPC_URL",
        "POWERLOOM_RPC_URL",
        "SIGNER_ACCOUNT_ADDRESS",
        "SIGNER_ACCOUNT_PRIVATE_KEY",
        "SLOT_ID",
        "PROTOCOL_STATE_CONTRACT",
        "DATA_MARKET_CONTRACT",
        "NAMESPACE",
        "POWERLOOM_CHAIN",
        "SOURCE_CHAIN",
        "LITE_NODE_START_BLOCK",
    ];
    let mut env: Vec<String> =
        host_env.iter().filter(|(k, _)| keep.contains(&k.as_str())).map(|(k, v)| format!("{k}={v}")).collect();
    // The package built in the tests' profile (the first line), as every
    // other drill builds one (an operator's default, release, costs this
    // drill a minute of both cores in CI; a bench's run builds release).
    env.extend([
        format!("LITE_NODE_COMPUTE_PROFILE={}", lite_node_testkit::compute_profile()),
        "LITE_NODE_POLL_INTERVAL_MS=200".to_owned(),
        "LOCAL_COLLECTOR_HOST=127.0.0.1".to_owned(),
        format!("LOCAL_COLLECTOR_PORT={collector_port}"),
        format!("STATUS_PORT={status_port}"),
    ]);
    let env_file = ctx.path().join("node.env");
    std::fs::write(&env_file, env.join("\n") + "\n").unwrap();
    let volume = format!("{volume_name}:/data");
    podman(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "--env-file",
        env_file.to_str().unwrap(),
        "-v",
        &volume,
        &drill.image,
    ]);
    let health = || {
        reqwest::blocking::Client::new()
            .get(format!("http://127.0.0.1:{status_port}/health"))
            .timeout(Duration::from_secs(2))
            .send()
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    let accepted =
        || collector.verdicts().iter().filter(|l| l.starts_with("accepted epoch ")).cloned().collect::<Vec<_>>();
    let logs = || {
        let out = std::process::Command::new("podman").args(["logs", &name]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };

    // 1. Fetched and built once, healthy, submitting (epochs are released
    // until the node, once its package is built, has one accepted).
    let first = Instant::now();
    poll_podman("the container's first accepted submission", Duration::from_secs(600), || {
        if podman(&["inspect", "--format", "{{.State.Running}}", &name]).trim() != "true" {
            panic!("the container stopped:\n{}", logs());
        }
        if logs().contains("watching ProtocolState") {
            world.release_next_epoch();
        }
        (!accepted().is_empty()).then_some(())
    });
    println!("first accepted submission {:.0} s after `podman run`", first.elapsed().as_secs_f64());
    poll_until("healthy", Duration::from_secs(60), || (health() == 200).then_some(()));

    // 2. `podman stop` mid-epoch: within the image's grace (8 s of docker's 10).
    world.release_next_epoch();
    let stop = Instant::now();
    podman(&["stop", "-t", "10", &name]);
    let took = stop.elapsed();
    let code = podman(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
    assert_eq!(code.trim(), "0", "a stop is a clean exit:\n{}", logs());
    assert!(took < Duration::from_secs(10), "stopped in {took:?}, not killed by the timeout");

    // 3. The same volume: healthy again without a rebuild, nothing sent twice.
    let before = logs().matches("building compute package").count();
    let restart = Instant::now();
    podman(&["start", &name]);
    poll_until("healthy after the restart", Duration::from_secs(60), || (health() == 200).then_some(()));
    println!("healthy {:.1} s after the restart", restart.elapsed().as_secs_f64());
    let n = accepted().len();
    world.release_next_epoch();
    poll_until("a submission after the restart", Duration::from_secs(60), || (accepted().len() > n).then_some(()));
    assert_eq!(logs().matches("building compute package").count(), before, "no rebuild after the restart:\n{}", logs());
    let all = accepted();
    let mut keys: Vec<String> =
        all.iter().map(|l| l.split_whitespace().take(6).collect::<Vec<_>>().join(" ")).collect();
    keys.sort();
    let unique = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), unique, "something was accepted twice: {all:#?}");

    // 4. Submissions fail (the collector is gone): the image's health check fails.
    drop(collector);
    world.release_next_epoch();
    poll_podman("the health check failing", Duration::from_secs(60), || {
        let check = std::process::Command::new("podman").args(["healthcheck", "run", &name]).output().unwrap();
        (!check.status.success()).then_some(())
    });

    // 5. No key in anything the container printed.
    let printed = logs();
    assert!(!printed.contains(&key), "the signer key is in `podman logs`");

    // 6. The node killed inside: the container ends at once, for the restart policy to act.
    let kill = r#"for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = lite-node ] && kill -KILL "${p#/proc/}"; done; true"#;
    // Its status is not asked: the container ending at once ends the exec too (137).
    let _ = std::process::Command::new("podman").args(["exec", &name, "sh", "-c", kill]).output();
    poll_podman("the container ended", Duration::from_secs(10), || {
        (podman(&["inspect", "--format", "{{.State.Running}}", &name]).trim() == "false").then_some(())
    });

    // 7. docker-compose.yaml, as an operator runs it: the market's `.env`
    // from `lite-node market env` with the key filled in and nothing else,
    // the project's collector beside the node, both from this image.
    podman(&["rm", &name]);
    compose_runs_the_node_beside_its_collector(&world, bin, &drill.image, &project, ctx.path(), &key);
}

/// The compose drill, on the node's volume of the drill before (its package
/// built there): the market's manifest (its RPC where the compose
/// network reaches the devnet's chain), `market peers --set`, `market env
/// --slot 2` with the key filled in as the whole `.env`; `podman-compose up`
/// with the image just built; the collector's health check passes, the
/// node's first submission is accepted by that collector (the node finds
/// it by its service name) and published to the market's validator (a
/// `lite-node validator` on the host, started from `market env
/// --validator`), which accepts it by every rule of the market; the node's
/// health check passes, and neither container prints the key.
fn compose_runs_the_node_beside_its_collector(
    world: &lite_node_testkit::World,
    bin: &std::path::Path,
    image: &str,
    project: &str,
    dir: &std::path::Path,
    key: &str,
) {
    use std::time::{Duration, Instant};

    use lite_node_testkit::poll_until;

    // The chain listens on loopback; the containers reach the host at its
    // own address, where a relay forwards to it.
    let host = host_address();
    let anvil: std::net::SocketAddr = world.url().trim_start_matches("http://").parse().unwrap();
    let rpc = format!("http://{}", relay(host, anvil));
    let m = &world.manifest;
    let chain = |name: &str| serde_json::json!({ "name": name, "chainId": m.chain_id, "rpcs": [rpc] });
    let manifest = serde_json::json!({
        "version": 1,
        "anchor": chain("devnet"),
        "source": chain("ETH"),
        "protocolState": m.protocol_state,
        "dataMarket": m.data_market,
        "deployer": m.accounts[0].address,
        "deployBlock": 0,
        "epochSize": 1,
        "namespace": "UNISWAPV3",
    });
    let market = dir.join("market.json");
    std::fs::write(&market, serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
    let lite_node = |args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "lite-node {args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        text
    };
    // The market publishes its projects in a git repository the operators
    // reach (here `git daemon` on the host) and pins them (issue 55): the
    // `.env` from `market env` names them and what identifies them.
    let config = dir.join("market-config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::copy(workspace_root().join("projects.json"), config.join("projects.json")).unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).current_dir(&config).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "projects.json"]);
    git(&["-c", "user.name=market", "-c", "user.email=market@example.org", "commit", "-q", "-m", "projects"]);
    let commit = git(&["rev-parse", "HEAD"]);
    let daemon = GitDaemon::start(host, dir);
    let repo = format!("git://{}/market-config", daemon.addr);
    let pinned = lite_node(&[
        "market",
        "pin",
        "--projects-repo",
        &repo,
        "--projects-branch",
        "main",
        "--projects-commit",
        &commit,
        "--manifest",
        market.to_str().unwrap(),
    ]);
    assert!(pinned.contains("projects: projects.json in git://"), "{pinned}");
    // The market's validator: a real `lite-node validator` on the host (its
    // own Redis; the deployer's key, which the market's owner makes one of
    // its validators), its gossip where the compose network reaches it,
    // started as a new validator is: `market env --validator`'s variables
    // as its env file and the market's flags the block prints. It judges
    // the compose node's submissions by every rule of the market — the
    // registered signer, the window, the slot's selection, the market's
    // projects and pools — as they reach it over gossip (a node with other
    // projects its collector refuses first: `check::projects_or_a_package_…`).
    world.register_validators(1);
    let redis = lite_node_testkit::RedisServer::start();
    let validator_dir = dir.join("validator");
    let p2p_port = std::net::TcpListener::bind((host, 0)).unwrap().local_addr().unwrap().port();
    let peer_id = lite_node(&["peer-id", "--data-dir", validator_dir.to_str().unwrap()]);
    let peer = format!("/ip4/{host}/tcp/{p2p_port}/p2p/{}", peer_id.trim());
    let said = lite_node(&["market", "peers", "--set", &peer, "--manifest", market.to_str().unwrap()]);
    assert!(said.contains(&peer), "{said}");
    let env = lite_node(&["market", "env", "--slot", "2", "--manifest", market.to_str().unwrap()]);
    assert!(env.contains(&format!("VALIDATOR_PEERS={peer}\n")), "{env}");
    assert!(
        env.contains(&format!("SNAPSHOT_CONFIG_REPO={repo}\n")) && env.contains("MARKET_PROJECTS_HASH=0x"),
        "{env}"
    );
    let mut env = env.replace("SIGNER_ACCOUNT_PRIVATE_KEY=\n", &format!("SIGNER_ACCOUNT_PRIVATE_KEY={key}\n"));
    // The package in the tests' profile, as the drill before built it on
    // this volume (its build is taken over, not done again).
    env.push_str(&format!("LITE_NODE_COMPUTE_PROFILE={}\n", lite_node_testkit::compute_profile()));
    std::fs::write(dir.join(".env"), env).unwrap();
    std::fs::copy(workspace_root().join("docker-compose.yaml"), dir.join("docker-compose.yaml")).unwrap();

    let block = lite_node(&["market", "env", "--validator", "--manifest", market.to_str().unwrap()]);
    let validator_key = &m.accounts[0].private_key;
    let validator_env: String = block
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| if l == "VALIDATOR_SIGNER_PRIVATE_KEY=" { format!("{l}{validator_key}\n") } else { format!("{l}\n") })
        .collect();
    assert!(validator_env.contains("MARKET_PROJECTS_HASH=0x"), "{block}");
    std::fs::write(dir.join("validator.env"), validator_env).unwrap();
    // The flags the block prints for every validator of the market.
    let flags: Vec<&str> = block
        .lines()
        .filter_map(|l| l.strip_prefix("#     --"))
        .filter(|l| !l.contains('…'))
        .flat_map(|l| {
            let (flag, value) = l.trim_end_matches(" \\").split_once(' ').unwrap();
            [flag, value]
        })
        .collect();
    assert!(flags.contains(&"anchor-rpc") && flags.contains(&"p2p-bootstrap"), "{block}");
    let api = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let gateway = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let validator_log = dir.join("validator.log");
    let mut validator = lite_node_testkit::Reaped(
        std::process::Command::new(bin)
            .arg("--env-file")
            .arg(dir.join("validator.env"))
            .arg("validator")
            .args(flags.chunks(2).flat_map(|f| [format!("--{}", f[0]), f[1].to_owned()]))
            // This market's projects (the image's, `blockDetails`) are not
            // per pool, so they list none: the dequeuer's selection check is
            // given the chain's, as the market's validators are.
            .args(["--pools", &m.pools.join(",")])
            .args(["--validator-id", "validator-1", "--redis-url", &redis.url()])
            .args(["--listen", &gateway.to_string(), "--api-listen", &api.to_string()])
            .args(["--p2p-listen", &format!("/ip4/{host}/tcp/{p2p_port}")])
            .arg("--data-dir")
            .arg(&validator_dir)
            .env_clear()
            .envs(lite_node_testkit::toolchain_env())
            // Its selection check builds the package: where the tests build it.
            .envs(lite_node_testkit::compute_build_env())
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&validator_log).unwrap())
            .spawn()
            .expect("lite-node validator starts"),
    );
    let validator_log = || std::fs::read_to_string(&validator_log).unwrap_or_default();
    let metrics = || {
        reqwest::blocking::Client::new()
            .get(format!("http://{api}/metrics"))
            .timeout(Duration::from_secs(2))
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default()
    };
    // A metric's value summed over its labels.
    let count = |text: &str, name: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    poll_until("the validator following the chain", Duration::from_secs(60), || {
        if let Ok(Some(status)) = validator.0.try_wait() {
            panic!("the validator ended ({status}):\n{}", validator_log());
        }
        metrics().contains("submissions_accepted").then_some(())
    });

    let compose = Compose { project: project.to_owned(), dir: dir.to_owned() };
    let status_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    compose.run(&["up", "-d"], &[("LITE_NODE_IMAGE", image), ("STATUS_PORT", &status_port)]);
    let (collector, node) = (format!("{project}_collector_1"), format!("{project}_lite-node_1"));
    let logs = |c: &str| {
        let out = std::process::Command::new("podman").args(["logs", c]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let healthy = |c: &str| std::process::Command::new("podman").args(["healthcheck", "run", c]).output().unwrap();
    let up = Instant::now();
    poll_podman("the compose collector's health check passing", Duration::from_secs(60), || {
        if podman(&["inspect", "--format", "{{.State.Running}}", &collector]).trim() != "true" {
            panic!("{collector} stopped:\n{}", logs(&collector));
        }
        healthy(&collector).status.success().then_some(())
    });
    println!("compose: collector healthy {:.1} s after `up`", up.elapsed().as_secs_f64());
    poll_podman("the compose node's first accepted submission", Duration::from_secs(600), || {
        for c in [&collector, &node] {
            if podman(&["inspect", "--format", "{{.State.Running}}", c]).trim() != "true" {
                panic!("{c} stopped:\n{}", logs(c));
            }
        }
        if logs(&node).contains("watching ProtocolState") {
            world.release_next_epoch();
        }
        logs(&collector).contains("accepted epoch ").then_some(())
    });
    println!("compose: first submission accepted {:.0} s after `up`", up.elapsed().as_secs_f64());
    // The market's validator took it: every rule of the market held.
    let judged =
        poll_until("the validator's verdict on the compose node's submission", Duration::from_secs(60), || {
            let text = metrics();
            (count(&text, "validator_submissions_accepted_total") > 0).then_some(text)
        });
    assert_eq!(
        count(&judged, "validator_submissions_rejected_total"),
        0,
        "the validator rejected nothing:\n{judged}\n{}",
        validator_log()
    );
    println!(
        "compose: the market's validator accepted {} submission(s), rejected none",
        count(&judged, "validator_submissions_accepted_total")
    );
    // The node and its collector took the market's pinned projects, checked
    // against what identifies them.
    let started = logs(&node);
    assert!(started.contains("ok   market's projects: the market's"), "{started}");
    poll_podman("the compose node's health check passing", Duration::from_secs(60), || {
        healthy(&node).status.success().then_some(())
    });
    for c in [&collector, &node] {
        assert!(!logs(c).contains(key), "the signer key is in `podman logs {c}`");
    }
    compose.run(&["down", "-v"], &[("LITE_NODE_IMAGE", image)]);
}

/// `git daemon` serving the repositories under a directory (`git://`), on
/// the host's address the containers reach; stopped with the test.
struct GitDaemon {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl GitDaemon {
    fn start(host: std::net::IpAddr, base: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind((host, 0)).unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new("git")
            .args(["daemon", "--reuseaddr", "--export-all", "--informative-errors"])
            .arg(format!("--base-path={}", base.display()))
            .arg(format!("--listen={host}"))
            .arg(format!("--port={port}"))
            .arg(base)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon starts");
        let addr = std::net::SocketAddr::new(host, port);
        lite_node_testkit::poll_until("git daemon listening", std::time::Duration::from_secs(10), || {
            std::net::TcpStream::connect(addr).ok()
        });
        Self { child, addr }
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A compose project, taken down with its volumes however the test ends.
struct Compose {
    project: String,
    dir: std::path::PathBuf,
}

impl Compose {
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
        let mut c = std::process::Command::new("podman-compose");
        c.arg("-p").arg(&self.project).args(args).current_dir(&self.dir).envs(env.iter().copied());
        c
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) {
        let out = self
            .command(args, env)
            .output()
            .unwrap_or_else(|e| panic!("podman-compose: {e} (`./init.sh test` installs it: devnet/container-base.sh)"));
        assert!(
            out.status.success(),
            "podman-compose {args:?}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.command(&["down", "-v", "-t", "0"], &[("LITE_NODE_IMAGE", "unused")]).output();
    }
}

/// This host's own address on its outbound interface: where a container on
/// a bridge network reaches the host.
fn host_address() -> std::net::IpAddr {
    // Connecting a UDP socket sends nothing: it only picks the route.
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    probe.connect("198.51.100.1:9").expect("a route off the host (for the compose network to reach it)");
    let ip = probe.local_addr().unwrap().ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "the host's outbound address: {ip}");
    ip
}

/// Forwards TCP connections to `host`:(any port) on to `target`, for the
/// rest of the test process; returns where it listens.
fn relay(host: std::net::IpAddr, target: std::net::SocketAddr) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind((host, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(target) else { continue };
            let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            };
            if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                pipe(c, server);
                pipe(s, client);
            }
        }
    });
    addr
}
