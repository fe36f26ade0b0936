//! Validating the Python script of a custom tool, with a real Python parser
//! (`rustpython-parser`, pinned). Tool uploads use it now; the runner's `POST /tools/validation`
//! will use the same function.
//!
//! A valid script is UTF-8, at most [`MAX_SCRIPT_BYTES`], parses as a Python 3 module, and
//! defines the entry point at top level: `def run(...)` or `async def run(...)`. The runner calls
//! `run` with the tool's arguments as keyword arguments and uses its return value as the result.

use rustpython_parser::source_code::RandomLocator;
use rustpython_parser::{Mode, ast};
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
    fn general(message: impl Into<String>) -> Self {
        Self { message: message.into(), line: None, column: None }
    }
}

/// Checks a custom tool script.
pub fn validate_script(source: &str) -> Result<(), ScriptProblem> {
    if source.len() > MAX_SCRIPT_BYTES {
        return Err(ScriptProblem::general(format!("the script is larger than {MAX_SCRIPT_BYTES} bytes")));
    }
    if source.trim().is_empty() {
        return Err(ScriptProblem::general("the script is empty"));
    }
    let module = rustpython_parser::parse(source, Mode::Module, "<tool>").map_err(|err| {
        let location = RandomLocator::new(source).locate(err.offset);
        ScriptProblem {
            message: format!("syntax error: {}", err.error),
            line: Some(location.row.get()),
            column: Some(location.column.get()),
        }
    })?;
    let ast::Mod::Module(module) = module else {
        return Err(ScriptProblem::general("the script is not a module"));
    };
    let defines_entry_point = module.body.iter().any(|statement| match statement {
        ast::Stmt::FunctionDef(function) => function.name.as_str() == ENTRY_POINT,
        ast::Stmt::AsyncFunctionDef(function) => function.name.as_str() == ENTRY_POINT,
        _ => false,
    });
    if defines_entry_point {
        Ok(())
    } else {
        Err(ScriptProblem::general(format!("the script must define a top-level function `{ENTRY_POINT}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_with_a_top_level_run_are_valid() {
        assert_eq!(
            validate_script("import json\n\ndef run(city: str) -> str:\n    return json.dumps({'city': city})\n"),
            Ok(())
        );
        assert_eq!(validate_script("async def run(**kwargs):\n    return kwargs\n"), Ok(()));
    }

    #[test]
    fn syntax_errors_report_line_and_column() {
        let problem = validate_script("def run():\n    return (1 +\n\nx = ]\n").unwrap_err();
        assert!(problem.message.starts_with("syntax error"), "{problem:?}");
        assert!(problem.line.is_some_and(|line| line >= 2), "{problem:?}");
        assert!(problem.column.is_some());
        let problem = validate_script("def run(:\n    pass\n").unwrap_err();
        assert_eq!((problem.line, problem.column), (Some(1), Some(9)));
    }

    #[test]
    fn the_entry_point_must_be_a_top_level_function() {
        for source in ["def main():\n    pass\n", "class T:\n    def run(self):\n        pass\n", "run = lambda: 1\n"] {
            let problem = validate_script(source).unwrap_err();
            assert!(problem.message.contains("`run`"), "{source}: {problem:?}");
        }
    }

    #[test]
    fn empty_and_oversized_scripts_are_refused() {
        assert!(validate_script("  \n").unwrap_err().message.contains("empty"));
        let huge = format!("def run():\n    return 1\n{}", "#".repeat(MAX_SCRIPT_BYTES));
        assert!(validate_script(&huge).unwrap_err().message.contains("larger"));
    }
}
