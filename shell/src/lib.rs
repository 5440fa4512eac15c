//! # fleetd (the shell)
//!
//! The side-effecting half of fleetd: it turns bytes from herdr, the broker and the north faces
//! into `fleet_core::Input`, and carries out `fleet_core::Output`. Today it holds the clock
//! port; the driver loop, the herdr and broker ports and the north faces land in their issues
//! (see `docs/architecture.md`).

pub mod clock;
