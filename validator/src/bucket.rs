//! Archives in an S3-compatible bucket (issue 54): a validator's archives
//! (`crate::archive`) uploaded once written, so they outlive its machine as
//! well as the market's servers, and read back by `lite-node archive
//! restore s3://…`. Through `object_store` (the Arrow project's), its S3
//! client only; any S3-compatible server (AWS, MinIO, R2, Ceph) serves.
//!
//! Where and as whom come from the `AWS_*` variables `object_store` reads
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT` for a server other than AWS's, `AWS_ALLOW_HTTP=true` for
//! one on plain http), from the process or the `--env-file`. The keys never
//! appear in a message: errors name the bucket and the object.

use std::{path::Path, sync::Arc};

use futures_util::StreamExt;
use object_store::{ObjectStore, WriteMultipart, aws::AmazonS3Builder, path::Path as Key};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An upload's part size: S3's smallest but one (5 MiB) is its floor.
const PART: usize = 8 << 20;

/// A bucket (and a prefix in it) archives are kept in.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    url: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.url).finish_non_exhaustive()
    }
}

/// One bucket is another when they are the same URL.
impl PartialEq for Bucket {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Eq for Bucket {}

impl Bucket {
    /// `s3://bucket[/prefix]`, configured by the `AWS_*` variables among
    /// `vars` (upper case, as `object_store` names them).
    pub fn from_url<'a>(url: &str, vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, String> {
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(format!("{url}: not an s3://bucket[/prefix] URL"));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{url}: no bucket named (s3://bucket[/prefix])"));
        }
        let mut builder = AmazonS3Builder::new().with_bucket_name(bucket);
        for (key, value) in vars {
            if key.starts_with("AWS_")
                && let Ok(config) = key.to_ascii_lowercase().parse()
            {
                builder = builder.with_config(config, value);
            }
        }
        let store = builder.build().map_err(|e| format!("{url}: {e}"))?;
        Ok(Self { store: Arc::new(store), prefix: prefix.trim_matches('/').to_owned(), url: url.to_owned() })
    }

    /// The URL it was made from.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn key(&self, name: &str) -> Key {
        if self.prefix.is_empty() { Key::from(name) } else { Key::from(format!("{}/{name}", self.prefix)) }
    }

    /// The archives in it (`epochs-{first}-{last}.car` directly under the
    /// prefix), with their sizes, in epoch order.
    pub async fn archives(&self) -> Result<Vec<(String, u64)>, String> {
        let prefix = (!self.prefix.is_empty()).then(|| Key::from(self.prefix.as_str()));
        let mut list = self.store.list(prefix.as_ref());
        let mut out = Vec::new();
        while let Some(meta) = list.next().await {
            let meta = meta.map_err(|e| format!("listing {}: {e}", self.url))?;
            let Some(name) = meta.location.filename() else { continue };
            if crate::archive::range_of(name).is_some() && meta.location == self.key(name) {
                out.push((name.to_owned(), meta.size));
            }
        }
        out.sort_by_key(|(name, _)| crate::archive::range_of(name));
        Ok(out)
    }

    /// Uploads `file` under its name (in parts, a few at a time), and checks
    /// the bucket then holds as many bytes as the file; its size. A failed
    /// upload is aborted (no part left behind) and named.
    pub async fn upload(&self, file: &Path) -> Result<u64, String> {
        let name =
            file.file_name().and_then(|n| n.to_str()).ok_or_else(|| format!("{}: no file name", file.display()))?;
        let key = self.key(name);
        let where_to = format!("{}/{name}", self.url.trim_end_matches('/'));
        let mut source = tokio::fs::File::open(file).await.map_err(|e| format!("{}: {e}", file.display()))?;
        let size = source.metadata().await.map_err(|e| format!("{}: {e}", file.display()))?.len();
        let upload = self.store.put_multipart(&key).await.map_err(|e| format!("uploading to {where_to}: {e}"))?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match source.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = parts.abort().await;
                    return Err(format!("{}: {e}", file.display()));
                }
            };
            if n == 0 {
                break;
            }
            if let Err(e) = parts.wait_for_capacity(4).await {
                let _ = parts.abort().await;
                return Err(format!("uploading to {where_to}: {e}"));
            }
            parts.write(&buf[..n]);
        }
        parts.finish().await.map_err(|e| format!("uploading to {where_to}: {e}"))?;
        let held = self.store.head(&key).await.map_err(|e| format!("{where_to} after its upload: {e}"))?;
        if held.size != size {
            return Err(format!("{where_to} holds {} bytes after its upload, the file {size}", held.size));
        }
        Ok(size)
    }

    /// Downloads archive `name` to `to` (through a temporary file beside
    /// it: a failure leaves no half file).
    pub async fn download(&self, name: &str, to: &Path) -> Result<u64, String> {
        let from = format!("{}/{name}", self.url.trim_end_matches('/'));
        let tmp = to.with_extension("car.part");
        let got = async {
            let mut body = self.store.get(&self.key(name)).await.map_err(|e| format!("{from}: {e}"))?.into_stream();
            let mut out = tokio::fs::File::create(&tmp).await.map_err(|e| format!("{}: {e}", tmp.display()))?;
            let mut size = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| format!("{from}: {e}"))?;
                out.write_all(&chunk).await.map_err(|e| format!("{}: {e}", tmp.display()))?;
                size += chunk.len() as u64;
            }
            out.sync_all().await.map_err(|e| format!("{}: {e}", tmp.display()))?;
            tokio::fs::rename(&tmp, to).await.map_err(|e| format!("{}: {e}", to.display()))?;
            Ok::<_, String>(size)
        }
        .await;
        if got.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        got
    }
}

/// Uploads every archive in `dir` (`epochs-*.car`) to `bucket`, removing
/// each local copy once the bucket holds it whole; what was uploaded (name,
/// bytes). One that fails stays for the next round.
pub async fn upload_written(bucket: &Bucket, dir: &Path) -> (Vec<(String, u64)>, Vec<String>) {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| crate::archive::range_of(n).is_some())
            .collect(),
        Err(_) => return (Vec::new(), Vec::new()),
    };
    names.sort_by_key(|n| crate::archive::range_of(n));
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for name in names {
        let path = dir.join(&name);
        match bucket.upload(&path).await {
            Ok(size) => {
                let _ = std::fs::remove_file(&path);
                done.push((name, size));
            }
            Err(e) => failed.push(e),
        }
    }
    (done, failed)
}
