//! The engine's table of tabs ([`Tabs`]): each tab's conversation in ids (the engine owns it),
//! its warm session, its settings and its running job; and the memory policy over them: least
//! recently used idle tabs move to host memory, then to text, when the budgets are exceeded, and
//! idle tabs are saved for a warm restart on shutdown.

use std::collections::BTreeMap;

use super::branch::Held;
use super::convo_store::ConvoStore;
use super::images::MediaSpan;
use super::job::Job;
use super::kv_store::KvStore;
use super::protocol::{TabId, TabSettings, Tier};
use super::session::Session;
use super::tools::TabTools;
use gemma_model::model::Gemma;

/// What the engine keeps on disk.
pub(super) struct Stores {
    /// Warm-restart KV snapshots.
    pub kv: Option<KvStore>,
    /// The attached chats' conversations.
    pub convos: Option<ConvoStore>,
}

/// The engine's state for one tab.
pub(super) struct TabState {
    pub session: Session,
    /// The chat the UI saves this tab under, once attached: the conversation is saved with it.
    pub chat: Option<String>,
    /// The conversation in ids, up to the end of the last answer (the template closes it when
    /// the next turn comes); the session holds all of it once a turn has settled.
    pub convo: Vec<u32>,
    /// The ids of the conversation header in `convo`, right after BOS.
    pub header: Vec<u32>,
    /// The pictures in `convo`, each on its run of placeholders.
    pub images: Vec<MediaSpan>,
    /// Where the last model answer starts in `convo`, for regenerate.
    pub last_answer: Option<usize>,
    /// The exchanges in `convo`, with their texts (`None`: not known, e.g. a conversation
    /// saved by an earlier release).
    pub held: Option<Vec<Held>>,
    /// Its settings for the next turns, as the front end sent them.
    pub settings: TabSettings,
    pub job: Option<Job>,
    /// A message whose pictures and recordings are being encoded before its turn starts.
    pub encoding: Option<crate::worker::Encoding>,
    /// When the tab last started a turn (LRU order for eviction).
    pub last_used: u64,
    /// The tier last reported to the UI.
    pub tier: Tier,
    /// Its context limit in tokens: `settings.context`, else the engine's.
    pub context: usize,
    /// The tools the user approved for it.
    pub tools: TabTools,
}

impl TabState {
    /// Whether a turn runs, or a message's media are being encoded for one.
    pub fn busy(&self) -> bool {
        self.job.is_some() || self.encoding.is_some()
    }
}

/// Every tab the engine serves, by id.
#[derive(Default)]
pub(super) struct Tabs {
    map: BTreeMap<TabId, TabState>,
    clock: u64,
}

impl Tabs {
    /// The tab, made with defaults (a context of `context`) when it is new.
    pub fn get_or_insert(&mut self, tab: TabId, model: &Gemma, context: usize) -> &mut TabState {
        self.map.entry(tab).or_insert_with(|| TabState {
            session: Session::new(model),
            chat: None,
            convo: Vec::new(),
            header: Vec::new(),
            images: Vec::new(),
            last_answer: None,
            held: Some(Vec::new()),
            settings: TabSettings::default(),
            job: None,
            encoding: None,
            last_used: 0,
            context,
            tier: Tier::Device,
            tools: TabTools::default(),
        })
    }

    /// The tab, if the engine has it.
    pub fn get(&self, tab: TabId) -> Option<&TabState> {
        self.map.get(&tab)
    }

    /// Whether some tab's message is being encoded.
    pub fn encoding(&self) -> bool {
        self.map.values().any(|t| t.encoding.is_some())
    }

    /// Every running job.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.map.values().filter_map(|t| t.job.as_ref())
    }

    pub fn get_mut(&mut self, tab: TabId) -> Option<&mut TabState> {
        self.map.get_mut(&tab)
    }

    pub fn remove(&mut self, tab: TabId) {
        self.map.remove(&tab);
    }

    /// Marks the tab as used now (LRU order) and returns the new clock value.
    pub fn touch(&mut self, tab: TabId) -> u64 {
        self.clock += 1;
        if let Some(t) = self.map.get_mut(&tab) {
            t.last_used = self.clock;
        }
        self.clock
    }

    /// Whether any tab has a job running.
    pub fn busy(&self) -> bool {
        self.map.values().any(TabState::busy)
    }

    /// How many tabs have work.
    pub fn busy_count(&self) -> usize {
        self.map.values().filter(|t| t.busy()).count()
    }

    /// The next tab with a job after `last`, round-robin.
    pub fn next_busy(&self, last: Option<TabId>) -> Option<TabId> {
        let mut busy = self.map.iter().filter(|(_, t)| t.busy()).map(|(id, _)| *id);
        let first = busy.clone().next();
        busy.find(|id| last.is_none_or(|l| *id > l)).or(first)
    }

    /// Moves least recently used idle tabs to host memory, or to text when host memory is full
    /// too, until `device_budget` holds. `active` and generating tabs never move.
    pub fn enforce_budget(
        &mut self,
        active: TabId,
        device_budget: Option<usize>,
        host_budget: Option<usize>,
    ) {
        let Some(budget) = device_budget else { return };
        loop {
            let used: usize = self.map.values().map(|t| t.session.device_bytes()).sum();
            if used <= budget {
                break;
            }
            let victim = self
                .map
                .iter()
                .filter(|(id, t)| **id != active && !t.busy() && t.session.device_bytes() > 0)
                .min_by_key(|(_, t)| t.last_used)
                .map(|(id, _)| *id);
            let Some(victim) = victim else { break };
            let host_used: usize = self.map.values().map(|t| t.session.host_bytes()).sum();
            let t = self.map.get_mut(&victim).expect("victim exists");
            let fits = host_budget.is_none_or(|h| host_used + t.session.device_bytes() <= h);
            if fits {
                t.session.offload();
            } else {
                t.session.evict();
            }
        }
    }

    /// The tabs whose tier changed since the last call, with their new tier.
    pub fn changed_tiers(&mut self) -> Vec<(TabId, Tier)> {
        let mut changed = Vec::new();
        for (id, t) in self.map.iter_mut() {
            let tier = t.session.tier();
            if tier != t.tier {
                t.tier = tier;
                changed.push((*id, tier));
            }
        }
        changed
    }

    /// Saves the idle tabs' KV state for a warm restart, most recently used first, within the
    /// disk cap. Snapshots of earlier runs are removed first.
    pub fn persist(&self, kv: &KvStore) {
        kv.clear();
        let mut tabs: Vec<&TabState> = self
            .map
            .values()
            .filter(|t| !t.busy() && !t.convo.is_empty())
            .collect();
        tabs.sort_by_key(|t| std::cmp::Reverse(t.last_used));
        let mut used = 0;
        for t in tabs {
            used += kv.save(&t.convo, &t.session, used).unwrap_or(0);
        }
    }
}
