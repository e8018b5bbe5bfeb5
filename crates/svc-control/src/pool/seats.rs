//! Who sits in which pool VM: the pure placement rules of pool mode (decisions §15), with no
//! I/O, so they are tested on their own. [`super::Pool`] keeps one [`Seats`] behind a mutex.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use svc_core::SandboxId;
use tokio::sync::OnceCell;

/// The first user ID handed to a workspace; IDs below are the image's own users.
pub(crate) const FIRST_UID: u32 = 20_000;

/// A logical sandbox's place in a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seat {
    /// The owner (its workspace is `/workspace/<owner>`).
    pub(crate) owner: String,
    /// The unprivileged user its commands run as (group ID is the same number).
    pub(crate) uid: u32,
    /// Its default environment for every exec.
    pub(crate) env: BTreeMap<String, String>,
    /// True once the workspace exists; before, the seat is only reserved.
    pub(crate) placed: bool,
}

/// One pool VM.
pub(crate) struct Vm {
    /// The runtime's ID at the pool provider (never a sandbox record).
    pub(crate) id: SandboxId,
    /// Set once its creation finished: `Err` holds why it failed.
    pub(crate) ready: Arc<OnceCell<Result<(), String>>>,
    /// Logical sandboxes in it, placed or reserved.
    pub(crate) seats: BTreeMap<SandboxId, Seat>,
    /// When its last user left.
    pub(crate) idle_since: Option<Instant>,
}

impl Vm {
    fn new(id: SandboxId) -> Self {
        Vm {
            id,
            ready: Arc::new(OnceCell::new()),
            seats: BTreeMap::new(),
            idle_since: None,
        }
    }
}

/// Where a reserved seat is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reserved {
    /// The VM.
    pub(crate) vm: SandboxId,
    /// The seat's user ID.
    pub(crate) uid: u32,
    /// True when the VM does not exist yet and this reservation starts it.
    pub(crate) new_vm: bool,
}

/// Why a seat cannot be reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every VM is full and no more may start.
    Full {
        /// VMs now.
        vms: usize,
    },
    /// The owner already sits somewhere (one logical sandbox per user).
    Taken {
        /// Its sandbox.
        existing: SandboxId,
    },
}

/// Every pool VM of this worker and its seats.
pub(crate) struct Seats {
    vms: Vec<Vm>,
    max_vms: usize,
    max_users: usize,
    next_uid: u32,
}

impl Seats {
    pub(crate) fn new(max_vms: u32, max_users: u32) -> Self {
        Seats {
            vms: Vec::new(),
            max_vms: usize::try_from(max_vms).unwrap_or(usize::MAX),
            max_users: usize::try_from(max_users).unwrap_or(usize::MAX),
            next_uid: FIRST_UID,
        }
    }

    /// Reserves a seat for `owner`'s sandbox `id`: in the fullest VM with room (so VMs drain
    /// and idle ones can go), else in a new VM while fewer than `max_vms` exist.
    pub(crate) fn reserve(&mut self, owner: &str, id: &SandboxId) -> Result<Reserved, Refusal> {
        if let Some(existing) = self.seat_of(owner) {
            return Err(Refusal::Taken { existing });
        }
        let uid = self.next_uid;
        let seat = Seat {
            owner: owner.to_owned(),
            uid,
            env: BTreeMap::new(),
            placed: false,
        };
        let roomiest = self
            .vms
            .iter()
            .enumerate()
            .filter(|(_, vm)| vm.seats.len() < self.max_users && !failed(vm))
            .max_by_key(|(index, vm)| (vm.seats.len(), std::cmp::Reverse(*index)))
            .map(|(index, _)| index);
        let (index, new_vm) = match roomiest {
            Some(index) => (index, false),
            None if self.vms.len() < self.max_vms => {
                self.vms.push(Vm::new(SandboxId::generate()));
                (self.vms.len() - 1, true)
            }
            None => {
                return Err(Refusal::Full {
                    vms: self.vms.len(),
                })
            }
        };
        let vm = &mut self.vms[index];
        vm.seats.insert(id.clone(), seat);
        vm.idle_since = None;
        self.next_uid = uid.saturating_add(1);
        Ok(Reserved {
            vm: vm.id.clone(),
            uid,
            new_vm,
        })
    }

    /// The sandbox `owner` holds or is getting.
    pub(crate) fn seat_of(&self, owner: &str) -> Option<SandboxId> {
        self.vms.iter().find_map(|vm| {
            vm.seats
                .iter()
                .find(|(_, seat)| seat.owner == owner)
                .map(|(id, _)| id.clone())
        })
    }

    /// The seat of sandbox `id` and the VM it is in.
    pub(crate) fn find(&self, id: &SandboxId) -> Option<(&Vm, &Seat)> {
        self.vms
            .iter()
            .find_map(|vm| vm.seats.get(id).map(|seat| (vm, seat)))
    }

    /// The VM called `id`.
    pub(crate) fn vm(&self, id: &SandboxId) -> Option<&Vm> {
        self.vms.iter().find(|vm| &vm.id == id)
    }

    /// Marks the seat of `id` placed, with its environment; false when it is gone.
    pub(crate) fn place(&mut self, id: &SandboxId, env: BTreeMap<String, String>) -> bool {
        let seat = self.vms.iter_mut().find_map(|vm| vm.seats.get_mut(id));
        match seat {
            Some(seat) => {
                seat.placed = true;
                seat.env = env;
                true
            }
            None => false,
        }
    }

    /// Frees the seat of `id`. Returns its VM and seat, and whether the VM is now empty (its
    /// idle time starts at `now`).
    pub(crate) fn release(
        &mut self,
        id: &SandboxId,
        now: Instant,
    ) -> Option<(SandboxId, Seat, bool)> {
        let vm = self.vms.iter_mut().find(|vm| vm.seats.contains_key(id))?;
        let seat = vm.seats.remove(id)?;
        let empty = vm.seats.is_empty();
        if empty {
            vm.idle_since = Some(now);
        }
        Some((vm.id.clone(), seat, empty))
    }

    /// Removes VM `id` when it has been empty since `since`: nobody sat down in between.
    pub(crate) fn take_idle(&mut self, id: &SandboxId, since: Instant) -> bool {
        let idle = self
            .vms
            .iter()
            .position(|vm| &vm.id == id && vm.seats.is_empty() && vm.idle_since == Some(since));
        match idle {
            Some(index) => {
                self.vms.remove(index);
                true
            }
            None => false,
        }
    }

    /// Removes VM `id` whatever sits in it (it failed or vanished); returns its seats.
    pub(crate) fn remove_vm(&mut self, id: &SandboxId) -> Vec<(SandboxId, Seat)> {
        match self.vms.iter().position(|vm| &vm.id == id) {
            Some(index) => self.vms.remove(index).seats.into_iter().collect(),
            None => Vec::new(),
        }
    }

    /// Adds a VM found at start-up with its placed seats; returns the idle start when it has
    /// none. User IDs continue after the highest one seen.
    pub(crate) fn adopt(
        &mut self,
        id: SandboxId,
        seats: BTreeMap<SandboxId, Seat>,
        now: Instant,
    ) -> Option<Instant> {
        if let Some(highest) = seats.values().map(|seat| seat.uid).max() {
            self.next_uid = self.next_uid.max(highest.saturating_add(1));
        }
        let mut vm = Vm::new(id);
        // A VM that is running is ready.
        let _ = vm.ready.set(Ok(()));
        vm.seats = seats;
        vm.idle_since = vm.seats.is_empty().then_some(now);
        let idle = vm.idle_since;
        self.vms.push(vm);
        idle
    }

    /// Every placed seat with its VM.
    pub(crate) fn placed(&self) -> impl Iterator<Item = (&SandboxId, &Seat)> {
        self.vms
            .iter()
            .flat_map(|vm| vm.seats.iter().filter(|(_, seat)| seat.placed))
    }

    /// VMs, and users in them (reserved seats count: they are taken).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.vms.len(),
            self.vms.iter().map(|vm| vm.seats.len()).sum(),
        )
    }
}

/// A VM whose creation failed takes nobody new.
fn failed(vm: &Vm) -> bool {
    matches!(vm.ready.get(), Some(Err(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> SandboxId {
        SandboxId::generate()
    }

    #[test]
    fn fills_a_vm_before_starting_the_next_and_stops_at_max_vms() {
        let mut seats = Seats::new(2, 2);
        let a = seats.reserve("alice", &id()).unwrap();
        assert!(a.new_vm);
        let b = seats.reserve("bob", &id()).unwrap();
        assert_eq!((b.vm.clone(), b.new_vm), (a.vm.clone(), false), "reused");
        assert_ne!(a.uid, b.uid, "a user ID per workspace");
        let c = seats.reserve("carol", &id()).unwrap();
        assert!(c.new_vm && c.vm != a.vm);
        seats.reserve("dan", &id()).unwrap();
        assert_eq!(
            seats.reserve("erin", &id()),
            Err(Refusal::Full { vms: 2 }),
            "two VMs of two users"
        );
        assert_eq!(seats.counts(), (2, 4));
    }

    #[test]
    fn one_sandbox_per_owner() {
        let mut seats = Seats::new(1, 5);
        let first = id();
        seats.reserve("alice", &first).unwrap();
        assert_eq!(
            seats.reserve("alice", &id()),
            Err(Refusal::Taken {
                existing: first.clone()
            })
        );
        let now = Instant::now();
        seats.release(&first, now).unwrap();
        assert!(
            seats.reserve("alice", &id()).is_ok(),
            "free again once released"
        );
    }

    #[test]
    fn an_emptied_vm_goes_only_if_nobody_sat_down_since() {
        let mut seats = Seats::new(1, 5);
        let a = id();
        let vm = seats.reserve("alice", &a).unwrap().vm;
        let t0 = Instant::now();
        let (released_vm, seat, empty) = seats.release(&a, t0).unwrap();
        assert!(empty && released_vm == vm && seat.owner == "alice");
        let b = id();
        assert_eq!(
            seats.reserve("bob", &b).unwrap().vm,
            vm,
            "the idle VM is reused"
        );
        assert!(!seats.take_idle(&vm, t0), "bob sits in it");
        let t1 = Instant::now();
        seats.release(&b, t1).unwrap();
        assert!(
            !seats.take_idle(&vm, t0),
            "an older idle start does not count"
        );
        assert!(seats.take_idle(&vm, t1));
        assert_eq!(seats.counts(), (0, 0));
    }

    #[test]
    fn adopted_vms_continue_the_user_ids() {
        let mut seats = Seats::new(3, 5);
        let seat = Seat {
            owner: "alice".into(),
            uid: FIRST_UID + 7,
            env: BTreeMap::new(),
            placed: true,
        };
        let sandbox = id();
        let idle = seats.adopt(id(), BTreeMap::from([(sandbox, seat)]), Instant::now());
        assert!(idle.is_none());
        assert_eq!(seats.placed().count(), 1);
        let next = seats.reserve("bob", &id()).unwrap();
        assert_eq!(next.uid, FIRST_UID + 8);
        assert!(!next.new_vm);
        assert!(
            seats.adopt(id(), BTreeMap::new(), Instant::now()).is_some(),
            "an empty VM is idle"
        );
    }

    #[test]
    fn a_failed_vm_takes_nobody_and_hands_back_its_seats() {
        let mut seats = Seats::new(2, 5);
        let a = id();
        let vm = seats.reserve("alice", &a).unwrap().vm;
        let _ = seats.vm(&vm).unwrap().ready.set(Err("boom".into()));
        let b = seats.reserve("bob", &id()).unwrap();
        assert!(b.new_vm, "not into the failed VM");
        let gone = seats.remove_vm(&vm);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, a);
        assert!(seats.find(&a).is_none());
    }
}
