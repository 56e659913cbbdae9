//! Starting a devnet: the package, the world on anvil, slots and validators,
//! the collector and the nodes ([`Devnet::start`]).

use super::*;

impl Devnet {
    /// Checks the options, builds the package, writes projects.json, starts
    /// anvil with the world and registers every node's slots, then the
    /// validators, the collector and the nodes; returns once every node is
    /// watching the anchor (and has printed the table's header).
    pub(crate) async fn start(
        opts: Options,
        env: &EnvSnapshot,
        out: &mut dyn Write,
        shutdown: &mut Shutdown,
    ) -> Result<Self> {
        let started = Instant::now();
        let world_dir = world_dir(&opts);
        let anvil_bin = opts.devnet_dir.join(ANVIL_BIN);
        check_options(&opts, &world_dir, &anvil_bin)?;
        let mut manifest = Manifest::load(&world_dir)?;
        if let Some(n) = opts.pools {
            if n > manifest.pools.len() {
                bail!(BadInput(format!(
                    "--pools {n}: the world in {} has {} pools; build a bigger one with `devnet/build-world.sh \
                     --pools 1000 --out world-1000` (taken for --pools above 5 unless --world is given)",
                    world_dir.display(),
                    manifest.pools.len()
                )));
            }
            manifest.pools.truncate(n);
        }
        let total_slots = opts.total_slots.unwrap_or(opts.default_total_slots());

        // One devnet per run directory at a time; the run directory starts empty.
        let run_dir = std::path::absolute(opts.run_dir.clone().unwrap_or_else(|| opts.devnet_dir.join("run")))?;
        let lock_path = run_dir.with_extension("lock");
        if let Some(parent) = lock_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let lock = std::fs::File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            bail!(BadInput(format!(
                "another lite-node devnet is using {} (it holds {})",
                run_dir.display(),
                lock_path.display()
            )));
        }
        if run_dir.exists() {
            std::fs::remove_dir_all(&run_dir).with_context(|| format!("clearing {}", run_dir.display()))?;
        }
        std::fs::create_dir_all(&run_dir)?;

        // The compute package: built once here, shared by the collector and every node.
        let cache = std::path::absolute(opts.devnet_dir.join("cache"))?;
        let compute_env = env.for_devnet_compute(&run_dir.join("collector"), &cache);
        let compute_cfg = ComputeConfig::from_env(&compute_env)?;
        writeln!(out, "compute package: {}", describe_source(&compute_cfg))?;
        let package =
            tokio::task::spawn_blocking(move || -> Result<LoadedPackage> { Ok(compute::load(&compute_cfg)?) })
                .await??;
        let package = Arc::new(package);
        writeln!(out, "compute package {} ready", package.package.manifest.commit)?;

        // projects.json: the given projects (or the BDS base snapshot) over the
        // world's pools, checked against the package before anything starts.
        let pools: Vec<String> = manifest.pools.iter().map(|p| p.address.clone()).collect();
        let projects = run_dir.join("projects.json");
        let described = write_projects(&opts, env, &run_dir, &pools, &package, &projects)?;
        writeln!(out, "projects: {described}")?;
        let project_types: Vec<(String, Option<bool>)> = lite_node_config::Projects::load(&projects)?
            .projects
            .into_iter()
            .map(|p| (p.project_type, p.per_pool))
            .collect();
        let project_count = project_types.len();
        let market_projects = lite_node_protocol::submission::Projects::declared(
            NAMESPACE_VARS.map(|(_, v)| v).join("-"),
            project_types.clone(),
        );

        // The two chains, as a market has them: the source (the saved
        // Uniswap V3 world) and the anchor (empty), each its own anvil and
        // chain id.
        let source_anvil =
            AnvilProcess::start(&anvil_bin, "source", Some(&world_dir.join("state.json")), None, &run_dir, 4096)?;
        let anchor_anvil = AnvilProcess::start(&anvil_bin, "anchor", None, Some(ANCHOR_CHAIN_ID), &run_dir, 4096)?;
        let (source_url, url) = (source_anvil.url(), anchor_anvil.url());
        let io = lite_node_chain::IoRuntime::new()?;
        let anchor_rpc = Arc::new(
            lite_node_chain::HttpRpc::new("anchor", vec![url.clone()], Duration::from_secs(30), io.clone())
                .map_err(|e| anyhow!(e))?,
        );
        // The market, deployed by `lite-node market deploy`'s code (the
        // drill contract: the production one and the node count a devnet
        // may fix above its registered slots).
        let registered = *opts.hostile_slots().end();
        let deployer_key = manifest
            .key_of(&manifest.deployer)
            .ok_or_else(|| anyhow!("the devnet world's manifest has no key for its deployer"))?
            .to_owned();
        let owner = TxSender::new(anchor_rpc.clone(), &key_bytes(&deployer_key)?, ANCHOR_CHAIN_ID)
            .map_err(|e| anyhow!("the deployer's key: {e}"))?;
        let node_count = if total_slots == registered { 0 } else { total_slots };
        let deployed = lite_node_chain::market::deploy(
            &owner,
            drills_creation_code(&opts.devnet_dir, node_count)?,
            None,
            None,
            None,
            &mut |_| {},
        )
        .await?;
        let (protocol_state, data_market) = (deployed.protocol_state, deployed.data_market);
        let market = lite_node_chain::market::Manifest {
            version: 1,
            anchor: lite_node_chain::market::ChainEntry {
                name: NAMESPACE_VARS[0].1.into(),
                chain_id: ANCHOR_CHAIN_ID,
                rpcs: vec![url.clone()],
            },
            source: lite_node_chain::market::ChainEntry {
                name: NAMESPACE_VARS[2].1.into(),
                chain_id: manifest.chain_id,
                rpcs: vec![source_url.clone()],
            },
            protocol_state,
            data_market,
            deployer: deployed.deployer,
            deploy_block: deployed.block,
            deploy_block_hash: deployed.block_hash,
            epoch_size: 1,
            epochs_per_day: None,
            namespace: NAMESPACE_VARS[1].1.into(),
            validator_peers: Vec::new(),
            window_blocks: None,
            // The devnet's market requires the snapshot bytes.
            snapshots: Some(lite_node_chain::market::SnapshotTerms { required: true, ..Default::default() }),
            pairs_on_chain: None,
            data_apis: Vec::new(),
            compute: None,
            projects: None,
        };
        std::fs::write(run_dir.join("market.json"), serde_json::to_string_pretty(&market)? + "\n")?;
        let chains = Chains::connect(
            &ChainConfig::from_flags(&url, Some(&source_url), protocol_state, data_market, env)
                .map_err(|e| anyhow!(e))?,
        )
        .map_err(|e| anyhow!(e))?;
        let driver = Driver {
            source: chains.source.clone(),
            anchor: anchor_rpc.clone(),
            manifest: manifest.clone(),
            protocol_state,
            data_market,
        };
        // Lost on --load-state: Uniswap's gas depends on timestamps moving.
        driver.source_call("anvil_setBlockTimestampInterval", json!([12])).await?;
        let anchor = chains.anchor()?.clone();

        // Nodes: the world's signer of each node's first slot where it has one, a
        // derived key beyond; every slot of a node registered to its signer.
        let mut slots = Vec::new();
        for n in 1..=opts.nodes {
            let first = *opts.slots_of(n).start();
            let from_world =
                manifest.slots.iter().find(|s| s.slot_id == first).and_then(|s| manifest.key_of(&s.signer));
            let key = from_world.map_or_else(|| derived_key(first), str::to_owned);
            let signer: PrivateKeySigner = key.parse().map_err(|e| anyhow!("slot {first}'s key: {e}"))?;
            for slot_id in opts.slots_of(n) {
                driver.assign_slot(slot_id, signer.address()).await?;
            }
            slots.push((n, signer.address(), key));
        }
        // The full node: a slot of its own past the lite nodes', registered
        // as a full node on ProtocolState.
        let full = if opts.full_node_workers > 0 {
            let slot_id = opts.our_slots() + 1;
            let key = derived_key(slot_id);
            let signer: PrivateKeySigner = key.parse().map_err(|e| anyhow!("the full node's key: {e}"))?;
            driver.assign_slot(slot_id, signer.address()).await?;
            driver.set_full_node(slot_id).await?;
            Some((slot_id, signer.address(), key))
        } else {
            None
        };
        // The operators' slots, each registered to its own derived signer.
        if opts.operators > 0 {
            for slot_id in opts.operator_slots() {
                let signer: PrivateKeySigner =
                    derived_key(slot_id).parse().map_err(|e| anyhow!("operator {slot_id}'s key: {e}"))?;
                driver.assign_slot(slot_id, signer.address()).await?;
            }
            writeln!(out, "{} operators' slots registered: {:?}", opts.operators, opts.operator_slots())?;
        }
        for slot_id in opts.hostile_slots() {
            let signer: PrivateKeySigner =
                derived_key(slot_id).parse().map_err(|e| anyhow!("slot {slot_id}'s key: {e}"))?;
            driver.assign_slot(slot_id, signer.address()).await?;
        }
        // The releaser: its own key, granted by the owner, releasing each
        // source block as an epoch once mined.
        let releaser_key = derived_key(u64::MAX);
        let releaser_sender = TxSender::new(anchor_rpc.clone(), &key_bytes(&releaser_key)?, ANCHOR_CHAIN_ID)
            .map_err(|e| anyhow!("the releaser's key: {e}"))?;
        driver.grant_releaser(releaser_sender.address()).await?;
        let releaser = lite_node_chain::releaser::Releaser::new(
            anchor_rpc.clone(),
            vec![(source_url.clone(), chains.source.clone())],
            releaser_sender,
            lite_node_chain::releaser::ReleaserSettings {
                protocol_state,
                data_market,
                epoch_size: 1,
                finality: 0,
                first_block: None,
                replace_after: Duration::from_secs(30),
                max_source_lag: u64::MAX,
                max_fee_per_gas: None,
            },
        );
        let start_block = driver.head().await?;
        writeln!(
            out,
            "source chain {} on {source_url}: {} pools; anchor chain {ANCHOR_CHAIN_ID} on {url}: ProtocolState \
             {protocol_state}, {} slots registered, getTotalNodeCount = {total_slots}",
            manifest.chain_id,
            manifest.pools.len(),
            registered
        )?;

        let exe = std::env::current_exe().context("locating the lite-node binary")?;
        // Only the toolchain and compute-package variables: an operator's
        // own alert channels, status port or drills must not reach devnet children.
        let child_env: Vec<(String, String)> = compute_env.toolchain_and_compute();
        // The validators check projects against the market's namespace and projects.json.
        let mut validator_env = child_env.clone();
        validator_env.extend(NAMESPACE_VARS.map(|(k, v)| (k.to_owned(), v.to_owned())));
        validator_env.push(("PROJECTS_CONFIG".to_owned(), projects.display().to_string()));
        let validator_log = env.get("LITE_NODE_DEVNET_VALIDATOR_LOG").unwrap_or("info");
        validator_env.push(("RUST_LOG".to_owned(), validator_log.to_owned()));
        if !opts.pairs_on_chain {
            validator_env.push(("PAIRS_ON_CHAIN".to_owned(), "false".to_owned()));
        }

        // The validators, when asked: each its own Redis, process, gossip
        // identity and registered key, dialing the ones before it — through
        // the devnet's relays, so a drill can cut one off.
        let keys: Vec<String> = (1..=opts.validators).map(derived_validator_key).collect();
        if !keys.is_empty() {
            let addresses = keys
                .iter()
                .map(|k| k.parse::<PrivateKeySigner>().map(|s| s.address()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| anyhow!("a validator key: {e}"))?;
            driver.register_validators(&addresses).await?;
        }
        let mut validators: Vec<validator::DevnetValidator> = Vec::new();
        let mut switch = switch::Switch::default();
        for (i, key) in keys.iter().enumerate() {
            let mut bootstrap = Vec::new();
            for v in &validators {
                bootstrap.push(switch.link(i + 1, v.index, v.p2p_socket(), &v.peer_id).await?.parse()?);
            }
            let v = validator::DevnetValidator::start(
                &exe,
                &run_dir,
                i + 1,
                key,
                &bootstrap,
                &validator_env,
                &url,
                &source_url,
                &protocol_state.to_string(),
                &data_market.to_string(),
                &pools,
                start_block,
                opts.poll_interval,
            )
            .await?;
            writeln!(
                out,
                "validator {} ({}) on {} (gRPC gateway), monitor API on {}, gossip {}; windows stay open {} anchor \
                 blocks after a release",
                v.index, v.address, v.gateway, v.api, v.p2p, v.window_blocks
            )?;
            validators.push(v);
        }

        // The collector, in this process.
        let selection = Arc::new(
            SelectionCheck::new(chains.source.clone(), pools.clone(), package.clone(), market_projects).map_err(
                |e| {
                    BadInput(format!(
                        "{e}: the devnet expects each epoch's slots by the market's rule and checks every submission \
                     with it; export it with `assignments: slot_selection::assignments` in export_compute_module! \
                     (as `lite-node compute new` writes it)"
                    ))
                },
            )?,
        );
        let received = Received::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let collector_port = listener.local_addr()?.port();
        let (stop_collector, collector_stopped) = tokio::sync::oneshot::channel::<()>();
        let mut collector = Collector::new(anchor.clone(), ANCHOR_CHAIN_ID);
        (collector.received, collector.selection) = (Some(received.clone()), Some(selection.clone()));
        // It refuses what comes after the validators' window, as they would.
        if let Some(v) = validators.first() {
            collector.window_blocks = v.window_blocks;
        }
        // The devnet's market requires the snapshot bytes (every node sends
        // them): a submission without is refused here and by every
        // validator (`missing_bytes`).
        collector.snapshot.required = true;
        collector.own = Some(
            slots
                .iter()
                .flat_map(|(n, signer, _)| opts.slots_of(*n).map(move |slot| (slot, *signer)))
                .chain(full.as_ref().map(|(slot, signer, _)| (*slot, *signer)))
                .collect(),
        );
        // `kill-node-mid-burst`: the collector holds back the answers to that
        // node's submissions of the epoch until the node is killed, so some
        // are certainly sent and unanswered when it dies.
        let mut burst_holds = BTreeMap::new();
        for fault in &opts.faults {
            if let Fault::KillNodeMidBurst { slot, epoch, power_loss } = *fault
                && let Some((n, _, _)) = slots.iter().find(|(n, _, _)| opts.slots_of(*n).any(|s| s == slot))
            {
                let (release, held) = tokio::sync::watch::channel(false);
                collector.holds.push(collector::Hold { slots: opts.slots_of(*n).collect(), epoch, release: held });
                burst_holds.insert((slot, epoch), (release, power_loss));
            }
        }
        // The collector publishes what it accepts on the validators' gossip
        // network; the nodes are started once it reaches every validator.
        if !validators.is_empty() {
            let mut bootstrap = Vec::new();
            for v in &validators {
                bootstrap.push(switch.link(0, v.index, v.p2p_socket(), &v.peer_id).await?.parse()?);
            }
            let gossip = lite_node_validator::gossip::Gossip::publisher(lite_node_validator::gossip::Settings {
                listen: "/ip4/127.0.0.1/tcp/0".parse()?,
                bootstrap,
                identity: run_dir.join("collector").join("p2p-identity.key"),
                topic: lite_node_validator::gossip::SUBMISSIONS_TOPIC.into(),
            })?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while gossip.peers().await.subscribed < validators.len() {
                if tokio::time::Instant::now() > deadline {
                    bail!(
                        "the collector's gossip peer did not reach the {} validator(s) within 30 s; see their logs \
                         in {}",
                        validators.len(),
                        run_dir.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // …and each validator's intake says it listens (so the first
            // epoch, released after this, is one it watched whole).
            for v in validators.iter_mut() {
                v.wait_listening(Duration::from_secs(30)).await?;
            }
            collector.gossip = Some(gossip);
        }
        let serving = tokio::spawn(collector::serve(
            collector,
            listener,
            Box::pin(async move {
                let _ = collector_stopped.await;
            }),
        ));
        writeln!(
            out,
            "collector on 127.0.0.1:{collector_port} (checks signer, deadline and selection{})",
            if validators.is_empty() { "" } else { "; publishes what it accepts to the validators over gossip" }
        )?;

        // The market's other operators, each with its own collector.
        let operators = if opts.operators > 0 {
            let window_blocks =
                validators.first().map_or(lite_node_protocol::submission::WINDOW_BLOCKS, |v| v.window_blocks);
            let ops = operators::Operators::start(
                opts.operator_slots(),
                &operators::Setting {
                    exe: &exe,
                    run_dir: &run_dir,
                    env: &validator_env,
                    anchor: &anchor,
                    anchor_url: &url,
                    source_url: &source_url,
                    selection: &selection,
                    protocol_state,
                    data_market,
                    validators: &validators,
                    window_blocks,
                },
            )
            .await?;
            writeln!(out, "{}", ops.describe_start())?;
            Some(ops)
        } else {
            None
        };

        // The attackers, for the whole run.
        let (released_tx, released_rx) = tokio::sync::watch::channel(0u64);
        let hostile = if opts.hostile > 0 {
            let namespace = NAMESPACE_VARS.map(|(_, v)| v).join("-");
            let project_type = project_types.first().map_or("baseSnapshot".to_owned(), |(t, _)| t.clone());
            let project_of: Arc<dyn Fn(&str) -> String + Send + Sync> =
                Arc::new(move |pool: &str| format!("{project_type}:{}:{namespace}", pool.to_lowercase()));
            let h = hostile::Hostile::start(
                opts.hostile,
                &opts.hostile_slots().collect::<Vec<_>>(),
                hostile::Target {
                    run_dir: &run_dir,
                    validators: &validators,
                    protocol_state,
                    data_market,
                    registered,
                    project_of,
                    pools: pools.clone(),
                    released: released_rx,
                    received: received.clone(),
                },
            )
            .await?;
            writeln!(out, "{}", h.describe_start())?;
            Some(h)
        } else {
            None
        };

        let rerun = write_compute_run_env(&run_dir, &market, &projects, &child_env)?;
        writeln!(
            out,
            "re-run an epoch on this chain: lite-node --env-file {} compute run --epoch-id N",
            rerun.display()
        )?;

        // The nodes: what they share, then each its own signer, slots and dir.
        let mut base_env = child_env.clone();
        let shared = [
            ("SOURCE_RPC_URL", source_url.clone()),
            ("POWERLOOM_RPC_URL", if opts.anchor_ws { url.replacen("http://", "ws://", 1) } else { url.clone() }),
            ("PROTOCOL_STATE_CONTRACT", protocol_state.to_string()),
            ("DATA_MARKET_CONTRACT", data_market.to_string()),
            ("LOCAL_COLLECTOR_HOST", "127.0.0.1".into()),
            ("LOCAL_COLLECTOR_PORT", collector_port.to_string()),
            ("LITE_NODE_START_BLOCK", start_block.to_string()),
            ("LITE_NODE_POLL_INTERVAL_MS", opts.poll_interval.as_millis().to_string()),
            ("LITE_NODE_STOP_GRACE_SECS", NODE_STOP_GRACE.as_secs().to_string()),
            ("RUST_LOG", node_log_filter(env)),
        ];
        base_env.extend(shared.into_iter().map(|(k, v)| (k.to_owned(), v)));
        base_env.extend(NAMESPACE_VARS.map(|(k, v)| (k.to_owned(), v.to_owned())));
        if !opts.pairs_on_chain {
            // Roots only on chain: the nodes read what was finalized before
            // from the validators' APIs, proved against the root.
            base_env.push(("PAIRS_ON_CHAIN".into(), "false".into()));
            let apis: Vec<&str> = validators.iter().map(|v| v.api.as_str()).collect();
            base_env.push(("DATA_API_URLS".into(), apis.join(",")));
        }
        let mut nodes = Vec::new();
        for (index, signer, key) in &slots {
            let own: Vec<u64> = opts.slots_of(*index).collect();
            let data_dir = run_dir.join(format!("node-{index}"));
            std::fs::create_dir_all(&data_dir)?;
            let mut node_env = base_env.clone();
            let vars = [
                ("SIGNER_ACCOUNT_ADDRESS", signer.to_string()),
                ("SIGNER_ACCOUNT_PRIVATE_KEY", key.clone()),
                if own.len() == 1 {
                    ("SLOT_ID", own[0].to_string())
                } else {
                    ("SLOT_IDS", lite_node_config::format_slot_ids(&own))
                },
                ("PROJECTS_CONFIG", projects.display().to_string()),
                ("LITE_NODE_DATA_DIR", data_dir.display().to_string()),
            ];
            node_env.extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));
            if let Some(drill) = opts.drill_of(&own) {
                node_env.push(("LITE_NODE_DRILL".into(), drill.as_str().into()));
            }
            if let Some(url) = &opts.telegram_api_url {
                node_env.push(("TELEGRAM_API_URL".into(), url.clone()));
                node_env.push(("TELEGRAM_BOT_TOKEN".into(), PLACEHOLDER_BOT_TOKEN.into()));
                node_env.push(("TELEGRAM_CHAT_ID".into(), PLACEHOLDER_CHAT_ID.into()));
            }
            let log = run_dir.join(format!("node-{index}.log"));
            let process = Node::spawn(&exe, *index, &node_env, &log)?;
            nodes.push(Node {
                index: *index,
                slot_id: own[0],
                slots: own,
                signer: *signer,
                data_dir,
                process,
                peak_rss_kib: None,
                env: node_env,
                restarts: 0,
                full_node: false,
            });
        }
        let full_node = match full {
            None => None,
            Some((slot_id, signer, key)) => Some(
                start_full_node(
                    &opts,
                    &exe,
                    &run_dir,
                    &base_env,
                    data_market,
                    &projects,
                    (slot_id, signer, key),
                    &mut nodes,
                )
                .await?,
            ),
        };
        if let Some(f) = &full_node {
            writeln!(
                out,
                "full node: slot {} (registered as a full node), its coordinator and {} workers ({}) on {}",
                f.slot_id,
                f.workers.len(),
                f.assign.name(),
                f.redis_url
            )?;
        }
        let outcomes = vec![BTreeMap::new(); validators.len()];
        let width = selected_width(opts.our_slots());
        let mut devnet = Devnet {
            opts,
            started,
            run_dir,
            _lock: lock,
            market,
            pools,
            package,
            source_anvil,
            anchor_anvil,
            _chains: chains,
            _io: io,
            driver,
            releaser,
            anchor,
            selection,
            received,
            stop_collector,
            serving,
            validators,
            switch,
            outcomes,
            onchain: BTreeMap::new(),
            nodes,
            full_node,
            operators,
            hostile,
            released_tx,
            exe,
            width,
            project_count,
            released: Vec::new(),
            burst_holds,
            interrupted: false,
            failure: None,
        };
        if let Err(e) = wait_until_watching(&mut devnet.nodes, shutdown).await {
            // Whatever started stops (the children's guards do the rest).
            devnet.stop_quietly();
            return Err(e);
        }
        devnet.header(out)?;
        Ok(devnet)
    }
}

/// Writes the nodes' projects.json: the projects given by `--projects`,
/// `PROJECTS_CONFIG` or `SNAPSHOT_CONFIG_REPO`, else the BDS base snapshot —
/// with the world's pools wherever a project lists `pools` — after checking
/// that the package runs every one of them. Returns how to describe them.
pub(crate) fn write_projects(
    opts: &Options,
    env: &EnvSnapshot,
    run_dir: &Path,
    pools: &[String],
    package: &LoadedPackage,
    to: &Path,
) -> Result<String> {
    let given = match &opts.projects {
        Some(path) => Some(lite_node_config::ProjectsSource::File(std::path::absolute(path)?)),
        None if lite_node_config::ProjectsSource::configured(env) => {
            Some(lite_node_config::ProjectsSource::from_env(env)?)
        }
        None => None,
    };
    let (projects, from) = match &given {
        Some(source) => {
            let from = match source {
                lite_node_config::ProjectsSource::File(path) => path.display().to_string(),
                lite_node_config::ProjectsSource::Git { pin, file } => {
                    format!("{} in {}", file.display(), lite_node_config::redact_url(&pin.url))
                }
            };
            (lite_node_compute::load_projects(source, &run_dir.join("projects-repo"))?.projects, from)
        }
        None => {
            let bds = json!({"config": [{
                "project_type": "baseSnapshot",
                "processor": {"module": "bds_uniswapv3", "class_name": "BaseSnapshotProcessor"},
                "preload_tasks": ["block_details"],
                "per_pool": true,
                "pools": [],
            }]});
            (
                lite_node_config::Projects::parse(&bds.to_string(), "the BDS projects")?.projects,
                "the BDS base snapshot".into(),
            )
        }
    };
    let mut entries = Vec::new();
    let mut pooled = Vec::new();
    for mut project in projects {
        if project.settings.contains_key("pools") {
            project.settings.insert("pools".into(), json!(pools));
            pooled.push(project.project_type.clone());
        }
        let fix = if given.is_some() {
            "give the package's own projects.json with --projects FILE or PROJECTS_CONFIG"
        } else {
            "the devnet runs the BDS base snapshot unless told otherwise: give the package's projects.json with \
             --projects FILE or PROJECTS_CONFIG"
        };
        package.project_processor(&project).map_err(|e| BadInput(format!("{e} ({from}); {fix}")))?;
        let mut entry = project.settings.clone();
        entry.insert("project_type".into(), json!(project.project_type));
        entry.insert("processor".into(), json!({"module": project.module, "class_name": project.class_name}));
        entry.insert("preload_tasks".into(), json!(project.preload_tasks));
        if let Some(per_pool) = project.per_pool {
            entry.insert("per_pool".into(), json!(per_pool));
        }
        entries.push(serde_json::Value::Object(entry));
    }
    std::fs::write(to, serde_json::to_vec_pretty(&json!({ "config": entries }))?)?;
    let names: Vec<String> = entries.iter().filter_map(|e| e["project_type"].as_str().map(str::to_owned)).collect();
    let pooled = match pooled.len() {
        0 => String::new(),
        n if n == names.len() => format!(", over the world's {} pools", pools.len()),
        _ => format!(", {} over the world's {} pools", pooled.join(", "), pools.len()),
    };
    Ok(format!("{} from {from}{pooled}", names.join(", ")))
}

/// An env file for `lite-node compute run` against this devnet's chain, with
/// the same compute package and projects (readable by its owner only: it
/// holds the package's repository URL).
pub(crate) fn write_compute_run_env(
    run_dir: &Path,
    market: &lite_node_chain::market::Manifest,
    projects: &Path,
    child_env: &[(String, String)],
) -> Result<PathBuf> {
    let mut vars: Vec<(String, String)> = vec![
        ("SOURCE_RPC_URL".into(), market.source.rpcs.join(",")),
        ("POWERLOOM_RPC_URL".into(), market.anchor.rpcs.join(",")),
        ("PROTOCOL_STATE_CONTRACT".into(), market.protocol_state.to_string()),
        ("DATA_MARKET_CONTRACT".into(), market.data_market.to_string()),
        ("PROJECTS_CONFIG".into(), projects.display().to_string()),
        ("LITE_NODE_DATA_DIR".into(), run_dir.join("compute-run").display().to_string()),
        // So that `compute run` can tell this devnet has stopped.
        (DEVNET_RUN_DIR_VAR.into(), run_dir.display().to_string()),
    ];
    vars.extend(NAMESPACE_VARS.map(|(k, v)| (k.to_owned(), v.to_owned())));
    // Everything that decides which package is built, and against what.
    let decides = |k: &str| {
        k.starts_with("LITE_NODE_COMPUTE_")
            || k.starts_with("SNAPSHOTTER_COMPUTE_")
            || ["LITE_NODE_PLUGIN_API_DIR", "LITE_NODE_CARGO", "RUSTC"].contains(&k)
    };
    vars.extend(child_env.iter().filter(|(k, _)| decides(k)).cloned());
    let mut text = String::from("# lite-node compute run against this devnet (written by lite-node devnet)\n");
    for (k, v) in &vars {
        if v.contains('\'') || v.contains('\n') {
            bail!(BadInput(format!("{k} holds a quote or a line break, which the devnet's env file cannot carry")));
        }
        text.push_str(&format!("{k}='{v}'\n"));
    }
    let path = run_dir.join("compute-run.env");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
        f.write_all(text.as_bytes())?;
    }
    Ok(path)
}

pub(crate) fn describe_source(cfg: &ComputeConfig) -> String {
    match &cfg.source {
        lite_node_config::ComputeSource::Bundled(dir) => format!("the directory {}, as it is now", dir.display()),
        lite_node_config::ComputeSource::Git { pin, .. } => {
            format!(
                "{} at {}",
                lite_node_config::redact_url(&pin.url),
                pin.commit.as_deref().unwrap_or("the branch tip")
            )
        }
    }
}

/// The nodes log to files at `info` at least (start-up is detected from
/// their logs); a more verbose `RUST_LOG` is passed on.
pub(crate) fn node_log_filter(env: &EnvSnapshot) -> String {
    lite_node_config::LogSettings::from_env(env).map_or_else(|_| "info".to_owned(), |log| log.for_child_logs())
}

/// Validator `index`'s key (1, 2, …), derived so a devnet's validators are
/// the same from run to run (public: anyone can derive it).
pub(crate) fn derived_validator_key(index: u64) -> String {
    let key = alloy::primitives::keccak256(format!("lite-node devnet validator {index}"));
    format!("0x{}", hex::encode(key))
}

/// A signer key for a slot the saved world did not register (public:
/// anyone can derive it, like anvil's own development keys).
pub(crate) fn derived_key(slot_id: u64) -> String {
    let key = alloy::primitives::keccak256(format!("lite-node devnet slot {slot_id}"));
    format!("0x{}", hex::encode(key))
}

pub(crate) async fn wait_until_watching(nodes: &mut [Node], shutdown: &mut Shutdown) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut ready = 0;
        for n in nodes.iter_mut() {
            if n.process.started(&format!("node {}", n.index), "watching ProtocolState")? {
                ready += 1;
            }
        }
        if ready == nodes.len() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("only {ready} of {} nodes were watching after 120 s; see their logs", nodes.len());
        }
        tokio::select! {
            _ = shutdown.as_mut() => bail!("interrupted while the nodes were starting"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// Starts the full node: its projects (every pooled project as a full
/// node), its Redis, its coordinator (added to `nodes`) and its workers.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start_full_node(
    opts: &Options,
    exe: &Path,
    run_dir: &Path,
    base_env: &[(String, String)],
    market: Address,
    projects: &Path,
    (slot_id, signer, key): (u64, Address, String),
    nodes: &mut Vec<Node>,
) -> Result<full_node::FullNode> {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(projects)?)?;
    let mut pooled = Vec::new();
    for p in doc["config"].as_array_mut().into_iter().flatten() {
        if p.get("pools").is_some() {
            p["full_node"] = json!(true);
            pooled.push(p["project_type"].as_str().unwrap_or_default().to_owned());
        }
    }
    if pooled.is_empty() {
        bail!(BadInput(
            "--full-node-workers: no project lists `pools`, so a full node has nothing to divide among workers".into()
        ));
    }
    let full_projects = run_dir.join("projects-full-node.json");
    std::fs::write(&full_projects, serde_json::to_vec_pretty(&doc)?)?;
    let (redis, redis_url) = full_node::FullNode::start_redis(run_dir, None)?;
    let board = lite_node_config::cluster_name(&market, slot_id);
    let mut full = full_node::FullNode::new(slot_id, opts.assign, redis, redis_url.clone(), pooled, board);
    let mut env = base_env.to_vec();
    let vars = [
        ("SLOT_ID", slot_id.to_string()),
        ("PROJECTS_CONFIG", full_projects.display().to_string()),
        ("LITE_NODE_CLUSTER_REDIS_URL", redis_url),
        ("LITE_NODE_CLUSTER_ASSIGN", opts.assign.name().to_owned()),
    ];
    env.extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));

    let index = opts.nodes + 1;
    let data_dir = run_dir.join("full-node");
    std::fs::create_dir_all(&data_dir)?;
    let mut coordinator = env.clone();
    let vars = [
        ("LITE_NODE_ROLE", "coordinator".to_owned()),
        ("SIGNER_ACCOUNT_ADDRESS", signer.to_string()),
        ("SIGNER_ACCOUNT_PRIVATE_KEY", key),
        ("LITE_NODE_DATA_DIR", data_dir.display().to_string()),
    ];
    coordinator.extend(vars.into_iter().map(|(k, v)| (k.to_owned(), v)));
    let process = Node::spawn(exe, index, &coordinator, &run_dir.join("full-node.log"))?;
    nodes.push(Node {
        index,
        slot_id,
        slots: vec![slot_id],
        signer,
        data_dir,
        process,
        peak_rss_kib: None,
        env: coordinator,
        restarts: 0,
        full_node: true,
    });
    // The workers: no signer, no collector.
    let mut worker = env;
    worker.retain(|(k, _)| !k.starts_with("LOCAL_COLLECTOR_") && k != "LITE_NODE_START_BLOCK");
    worker.push(("LITE_NODE_ROLE".into(), "worker".into()));
    if let Some(delay) = opts.worker_rpc_delay {
        let anvil = base_env.iter().find(|(k, _)| k == "SOURCE_RPC_URL").map(|(_, v)| v.clone()).unwrap_or_default();
        let upstream = anvil.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let relayed = proxy::start(upstream, delay).await?;
        tracing::info!("the full node's workers reach the chain through {relayed}, {} ms later", delay.as_millis());
        worker.push(("SOURCE_RPC_URL".into(), relayed));
    }
    for k in 1..=opts.full_node_workers {
        let mut env = worker.clone();
        // `break-worker`: its source RPC through a relay the drill can cut.
        if opts.faults.iter().any(|f| matches!(f, Fault::BreakWorker { worker, .. } if *worker == k)) {
            let source = env.iter().rev().find(|(key, _)| key == "SOURCE_RPC_URL").map(|(_, v)| v.clone());
            let upstream = source.unwrap_or_default().trim_start_matches("http://").trim_end_matches('/').to_owned();
            let (relayed, switch) = proxy::start_breakable(upstream).await?;
            env.push(("SOURCE_RPC_URL".into(), relayed));
            full.breakers.insert(k, switch);
        }
        full.spawn_worker(exe, run_dir, k, &env)?;
    }
    full.wait_joined(Duration::from_secs(120)).await?;
    Ok(full)
}

/// The anchor chain's id on the devnet (the source chain keeps the saved
/// world's): two chains, as a market has them.
pub(crate) const ANCHOR_CHAIN_ID: u64 = 7001;

/// A key's 32 bytes from its hex (the world's and the derived keys).
pub(crate) fn key_bytes(key: &str) -> Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(key.trim_start_matches("0x"), &mut bytes).map_err(|e| anyhow!("a devnet key: {e}"))?;
    Ok(bytes)
}

/// ProtocolStateDrills' creation code (the test-only contract: the
/// production one and the devnet's node-count hook, as the pinned solc
/// compiled it, read from the checkout beside `devnet_dir`, else the one the
/// binary was built from — never embedded in the binary) with its
/// constructor's argument: the node count (0: the registered slots', as in
/// production).
pub(crate) fn drills_creation_code(devnet_dir: &Path, node_count: u64) -> Result<alloy::primitives::Bytes> {
    use alloy::sol_types::SolValue;
    const ARTIFACT: &str = "contracts/out/ProtocolStateDrills.json";
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let candidates = [devnet_dir.join("..").join(ARTIFACT), built_from.join(ARTIFACT)];
    let path = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
        BadInput(format!(
            "the devnet deploys {ARTIFACT} from a checkout of lite-node, and none is beside {} or at {}",
            devnet_dir.display(),
            built_from.display()
        ))
    })?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let artifact: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not a solc artifact", path.display()))?;
    let code = artifact["bytecode"].as_str().ok_or_else(|| anyhow!("{} has no bytecode", path.display()))?;
    let mut code: Vec<u8> =
        alloy::primitives::hex::decode(code).map_err(|e| anyhow!("{}: the bytecode: {e}", path.display()))?;
    code.extend(alloy::primitives::U256::from(node_count).abi_encode());
    Ok(code.into())
}
