//! Glob patterns over sandbox paths (decisions §9): absolute, with `*`, `?`, `[...]` and `**`
//! (zero or more directories). Parsed once by the control plane; providers receive it compiled
//! and only walk their tree.

use globset::{GlobBuilder, GlobMatcher};

use crate::path::SandboxPath;

/// A compiled pattern and where walking must start.
#[derive(Debug, Clone)]
pub struct SandboxGlob {
    matcher: GlobMatcher,
    /// The deepest directory with no pattern characters above the first wildcard.
    pub base: SandboxPath,
    /// How many levels below `base` can match; `None` with `**`.
    pub max_depth: Option<usize>,
}

fn has_meta(component: &str) -> bool {
    component.contains(['*', '?', '[', '{'])
}

impl SandboxGlob {
    /// Compiles an absolute pattern; the error says what is wrong with it.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let invalid = |message: String| message;
        let quoted = crate::error::echo(pattern);
        if !pattern.starts_with('/') {
            return Err(invalid(format!(
                "glob pattern {quoted} must be absolute (start with /)"
            )));
        }
        if pattern.contains('\0') {
            return Err(invalid(
                "glob pattern must not contain NUL bytes".to_owned(),
            ));
        }
        let components: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
        if components.iter().any(|c| *c == "." || *c == "..") {
            return Err(invalid(format!(
                "glob pattern {quoted} must not contain . or .. components"
            )));
        }
        let literal = components.iter().take_while(|c| !has_meta(c)).count();
        let base = SandboxPath::parse(&format!("/{}", components[..literal].join("/")))
            .map_err(|e| invalid(e.to_string()))?;
        let rest = &components[literal..];
        let max_depth = if rest.contains(&"**") {
            None
        } else {
            Some(rest.len())
        };
        let normalized = format!("/{}", components.join("/"));
        let matcher = GlobBuilder::new(&normalized)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| invalid(format!("invalid glob pattern {quoted}: {}", e.kind())))?
            .compile_matcher();
        Ok(SandboxGlob {
            matcher,
            base,
            max_depth,
        })
    }

    /// The pattern, normalised (what a guest agent compiles again on its side).
    pub fn pattern(&self) -> &str {
        self.matcher.glob().glob()
    }

    /// Whether an absolute sandbox path matches.
    pub fn is_match(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_base_and_depth() {
        let glob = SandboxGlob::new("/src/app/*.rs").unwrap();
        assert_eq!(glob.base.as_str(), "/src/app");
        assert_eq!(glob.max_depth, Some(1));
        assert!(glob.is_match("/src/app/main.rs"));
        assert!(!glob.is_match("/src/app/sub/main.rs"));
        let deep = SandboxGlob::new("/src/**/*.rs").unwrap();
        assert_eq!(deep.base.as_str(), "/src");
        assert_eq!(deep.max_depth, None);
        assert!(deep.is_match("/src/main.rs"), "** matches zero directories");
        assert!(deep.is_match("/src/a/b/c.rs"));
        let root = SandboxGlob::new("/*.txt").unwrap();
        assert!(root.base.is_root());
        assert!(SandboxGlob::new("/f?le[0-9].txt")
            .unwrap()
            .is_match("/file1.txt"));
    }

    #[test]
    fn rejects_relative_and_dotted() {
        assert!(SandboxGlob::new("*.rs").is_err());
        assert!(SandboxGlob::new("/a/../*.rs").is_err());
        assert!(SandboxGlob::new("/a/[").is_err());
    }
}
