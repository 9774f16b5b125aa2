//! Helpers shared by the commands.

pub mod idle_cpu;
pub mod latency;
pub mod measure;
pub mod output;
pub mod pingpong;
pub mod plot;
pub mod report;
pub mod scale;
pub mod size;
pub mod table;
pub mod timeline;
pub mod timing;
pub mod user;
pub mod zc;
pub mod zerocopy_bench;
