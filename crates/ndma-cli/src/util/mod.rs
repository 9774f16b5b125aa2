//! Helpers shared by the commands.

pub mod bed;
pub mod measure;
pub mod output;
pub mod pattern;
pub mod report;
pub mod size;
pub mod table;
pub mod timeline;
pub mod timing;
pub mod user;
pub mod zc;
