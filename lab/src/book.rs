//! The book's chapters, compiled as doctests: `cargo test` runs every Rust block in them.
//!
//! Each chapter becomes the documentation of one item, so a failing block is reported with the
//! chapter's name and its line. A test in `tests/it/book.rs` checks that every file listed in
//! `src/SUMMARY.md` appears here.

macro_rules! chapters {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[doc = include_str!(concat!("../../src/", $file))]
            pub struct $name;
        )*
    };
}

chapters! {
    Introduction => "introduction.md",
    LostReply => "lost-reply.md",
    Experiment => "experiment.md",
    Timelines => "timelines.md",
    FaultPlacement => "fault-placement.md",
    OperationKey => "operation-key.md",
    OneTransaction => "one-transaction.md",
    Idempotency => "idempotency.md",
    CheckYourOwnTool => "check-your-own-tool.md",
    CheckDetails => "check-details.md",
    ToolBoundary => "tool-boundary.md",
    PostgresExample => "postgres-example.md",
    Decisions => "decisions.md",
    AcceptanceTest => "acceptance-test.md",
    Limits => "limits.md",
    Simulation => "simulation.md",
    ModelChecking => "model-checking.md",
    Performance => "performance.md",
    PerformanceDetails => "performance-details.md",
    TargetFileReference => "target-file-reference.md",
    HttpDetails => "http-details.md",
    LabReference => "lab-reference.md",
    HttpBoundary => "http-boundary.md",
    HttpRunner => "http-runner.md",
    HttpExpiry => "http-expiry.md",
    Mcp => "mcp.md",
    McpReference => "mcp-reference.md",
    Audit => "audit.md",
    TeamExercise => "team-exercise.md",
    Testing => "testing.md",
    Glossary => "glossary.md",
}
