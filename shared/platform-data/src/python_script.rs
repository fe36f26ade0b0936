//! What a custom tool's Python script must be, and the checks made before Python sees it.
//!
//! A valid script is at most [`MAX_SCRIPT_BYTES`] of UTF-8, not blank, compiles as a Python 3
//! module, and defines the entry point at top level: `def run(...)` or `async def run(...)`. The
//! runner calls `run` with the tool's arguments as keyword arguments and uses its return value
//! as the result.
//!
//! The compile and the entry point are judged by the Python that runs the tools, in the tool
//! sandbox (`agent_runtime::tools::python::ToolSandbox::check_script`): CPython's own parser and
//! compiler, of the version the tool will run under, never executing the script. Here only the
//! [`precheck`]: what can be refused without it, and what bounds the request the sandbox gets.

use serde::Serialize;

/// Largest accepted script.
pub const MAX_SCRIPT_BYTES: usize = 256 * 1024;

/// The function every custom tool script defines.
pub const ENTRY_POINT: &str = "run";

/// Why a script was refused; syntax errors carry their 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScriptProblem {
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

impl ScriptProblem {
    /// A problem without a place in the script.
    pub fn general(message: impl Into<String>) -> Self {
        Self { message: message.into(), line: None, column: None }
    }

    /// The problem as one line: `message (line L, column C)` when it has a place.
    pub fn describe(&self) -> String {
        match (self.line, self.column) {
            (Some(line), Some(column)) => format!("{} (line {line}, column {column})", self.message),
            (Some(line), None) => format!("{} (line {line})", self.message),
            _ => self.message.clone(),
        }
    }
}

/// The checks that need no Python: the size, and a script that is not blank.
pub fn precheck(source: &str) -> Result<(), ScriptProblem> {
    if source.len() > MAX_SCRIPT_BYTES {
        return Err(ScriptProblem::general(format!("the script is larger than {MAX_SCRIPT_BYTES} bytes")));
    }
    if source.trim().is_empty() {
        return Err(ScriptProblem::general("the script is empty"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_and_oversized_scripts_are_refused_before_python() {
        assert_eq!(precheck("def run():\n    return 1\n"), Ok(()));
        // Syntax is Python's to judge: the precheck lets it through.
        assert_eq!(precheck("def run(:"), Ok(()));
        assert_eq!(precheck("  \n\t").unwrap_err().message, "the script is empty");
        let huge = format!("def run():\n    return 1\n{}", "#".repeat(MAX_SCRIPT_BYTES));
        assert_eq!(precheck(&huge).unwrap_err().message, format!("the script is larger than {MAX_SCRIPT_BYTES} bytes"));
        assert_eq!(precheck(&"#".repeat(MAX_SCRIPT_BYTES)), Ok(()));
    }

    #[test]
    fn a_problem_is_described_with_its_place() {
        let at = ScriptProblem { message: "syntax error: invalid syntax".into(), line: Some(3), column: Some(7) };
        assert_eq!(at.describe(), "syntax error: invalid syntax (line 3, column 7)");
        let line_only = ScriptProblem { line: Some(2), column: None, ..at.clone() };
        assert_eq!(line_only.describe(), "syntax error: invalid syntax (line 2)");
        assert_eq!(ScriptProblem::general("the script is empty").describe(), "the script is empty");
    }
}
