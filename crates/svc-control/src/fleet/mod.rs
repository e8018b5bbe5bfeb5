//! Several nodes as one (decisions §22): what this node answers other nodes
//! ([`answer`]), and other nodes' providers as spawns placed there use them ([`remote`]).

mod answer;
pub(crate) mod remote;
