//! Paths inside a sandbox: absolute, normalised lexically, `..` never climbing above the root.

use std::fmt;

/// A normalised absolute path inside a sandbox (`/`, `/a/b`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SandboxPath(String);

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPath {
    /// Not starting with `/`.
    #[error("path {} must be absolute (start with /)", crate::error::echo(.0))]
    Relative(String),
    /// Contains a NUL byte.
    #[error("path must not contain NUL bytes")]
    Nul,
}

impl SandboxPath {
    /// The root directory.
    pub fn root() -> Self {
        SandboxPath("/".to_owned())
    }

    /// Validates and normalises: collapses `//` and `.`, resolves `..` without leaving `/`.
    pub fn parse(input: &str) -> Result<Self, InvalidPath> {
        if input.contains('\0') {
            return Err(InvalidPath::Nul);
        }
        if !input.starts_with('/') {
            return Err(InvalidPath::Relative(input.to_owned()));
        }
        let mut parts: Vec<&str> = Vec::new();
        for part in input.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                other => parts.push(other),
            }
        }
        Ok(SandboxPath(format!("/{}", parts.join("/"))))
    }

    /// The path as text, always starting with `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The path without its leading `/`, for joining onto a host directory.
    pub fn relative(&self) -> &str {
        &self.0[1..]
    }

    /// The last component; empty for the root.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// The parent directory; the root's parent is the root.
    pub fn parent(&self) -> SandboxPath {
        match self.0.rfind('/') {
            Some(0) | None => SandboxPath::root(),
            Some(index) => SandboxPath(self.0[..index].to_owned()),
        }
    }

    /// A child path.
    pub fn join(&self, name: &str) -> SandboxPath {
        if self.is_root() {
            SandboxPath(format!("/{name}"))
        } else {
            SandboxPath(format!("{}/{name}", self.0))
        }
    }
}

/// A [`SandboxPath`] that is not `/`: what may be written, deleted or moved. Only the control
/// plane makes these, so a provider cannot be asked to delete a sandbox's root by mistake.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonRootPath(SandboxPath);

impl NonRootPath {
    /// `Some` unless `path` is `/`.
    pub fn new(path: SandboxPath) -> Option<Self> {
        (!path.is_root()).then_some(NonRootPath(path))
    }
}

impl NonRootPath {
    /// A fresh hidden name beside this path for an upload in progress, renamed over it once
    /// complete, so a reader never sees half a file and a failed upload leaves the old one.
    pub fn upload_sibling(&self) -> NonRootPath {
        use rand::Rng;
        let suffix: u64 = rand::rng().random();
        let name = format!(".{}.svc-upload-{suffix:016x}", self.file_name());
        let parent = self.parent();
        let joined = if parent.is_root() {
            format!("/{name}")
        } else {
            format!("{parent}/{name}")
        };
        NonRootPath(SandboxPath(joined))
    }
}

impl std::ops::Deref for NonRootPath {
    type Target = SandboxPath;

    fn deref(&self) -> &SandboxPath {
        &self.0
    }
}

impl fmt::Display for NonRootPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for SandboxPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises() {
        let cases = [
            ("/", "/"),
            ("//a//b/", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/../../etc/passwd", "/etc/passwd"),
            ("/a/b/..", "/a"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                SandboxPath::parse(input).unwrap().as_str(),
                expected,
                "{input}"
            );
        }
        assert!(matches!(
            SandboxPath::parse("a/b"),
            Err(InvalidPath::Relative(_))
        ));
        assert!(matches!(
            SandboxPath::parse(""),
            Err(InvalidPath::Relative(_))
        ));
        assert_eq!(SandboxPath::parse("/a\0b"), Err(InvalidPath::Nul));
    }

    #[test]
    fn non_root_paths() {
        assert!(NonRootPath::new(SandboxPath::root()).is_none());
        assert!(NonRootPath::new(SandboxPath::parse("/a/..").unwrap()).is_none());
        let path = NonRootPath::new(SandboxPath::parse("/a/b").unwrap()).unwrap();
        assert_eq!(path.file_name(), "b");
    }

    #[test]
    fn components() {
        let p = SandboxPath::parse("/a/b/c.txt").unwrap();
        assert_eq!(p.file_name(), "c.txt");
        assert_eq!(p.parent().as_str(), "/a/b");
        assert_eq!(p.relative(), "a/b/c.txt");
        assert_eq!(
            SandboxPath::parse("/a").unwrap().parent(),
            SandboxPath::root()
        );
        assert_eq!(SandboxPath::root().join("x").as_str(), "/x");
    }
}
