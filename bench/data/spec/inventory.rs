use std::collections::HashMap;
use std::fmt;

/// One line of an inventory: a name, a quantity and a unit price in cents.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub name: String,
    pub quantity: u32,
    pub price_cents: u64,
}

/// A store's inventory, keyed by item name.
#[derive(Default, Debug)]
pub struct Inventory {
    items: HashMap<String, Item>,
}

impl Inventory {
    /// An empty inventory.
    pub fn new() -> Self {
        Inventory { items: HashMap::new() }
    }

    /// Adds `quantity` of `name`, creating the item at `price_cents`.
    pub fn add(&mut self, name: &str, quantity: u32, price_cents: u64) {
        let item = self.items.entry(name.to_string()).or_insert(Item {
            name: name.to_string(),
            quantity: 0,
            price_cents,
        });
        item.quantity += quantity;
    }

    /// Removes `quantity` of `name`; false if there is not enough.
    pub fn remove(&mut self, name: &str, quantity: u32) -> bool {
        match self.items.get_mut(name) {
            Some(item) if item.quantity >= quantity => {
                item.quantity -= quantity;
                true
            }
            _ => false,
        }
    }

    /// How many of `name` are in stock.
    pub fn quantity(&self, name: &str) -> u32 {
        self.items.get(name).map(|i| i.quantity).unwrap_or(0)
    }

    /// The value of everything in stock, in cents.
    pub fn total_value(&self) -> u64 {
        self.items
            .values()
            .map(|i| i.quantity as u64 * i.price_cents)
            .sum()
    }

    /// Names of the items whose stock is below `threshold`, sorted.
    pub fn low_stock(&self, threshold: u32) -> Vec<String> {
        let mut names: Vec<String> = self
            .items
            .values()
            .filter(|i| i.quantity < threshold)
            .map(|i| i.name.clone())
            .collect();
        names.sort();
        names
    }
}

impl fmt::Display for Inventory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.items.keys().collect();
        names.sort();
        for name in names {
            let item = &self.items[name];
            writeln!(f, "{}: {} at {} cents", item.name, item.quantity, item.price_cents)?;
        }
        Ok(())
    }
}
