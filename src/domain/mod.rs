//! Pure rules: no IO, no async. Everything here is a function of its inputs.

pub mod access;
pub mod admission;
pub mod archive;
pub mod events;
pub mod grant;
pub mod ids;
pub mod json;
pub mod net;
pub mod policy;
pub mod proposal;
pub mod scope;
pub mod seal;
pub mod submission;
pub mod text;
pub mod time;
pub mod tools;
pub mod webhooks;
pub mod words;
