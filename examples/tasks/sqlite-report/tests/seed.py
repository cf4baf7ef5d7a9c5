import random
import sqlite3

random.seed(3)
db = sqlite3.connect("shop.db")
with open("schema.sql") as f:
    db.executescript(f.read())
names = ["Ada", "Brook", "Cyril", "Dana", "Emeka", "Farah", "Goran", "Hana"]
for i, n in enumerate(names, 1):
    db.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, n, random.choice(["DE", "NG", "JP"])))
for oid in range(1, 301):
    cid = random.randint(1, len(names))
    status = random.choice(["paid", "paid", "paid", "refunded", "pending"])
    amount = random.randint(100, 20000)
    if cid == 5 and status != "paid":
        amount *= 10  # big refunded or pending orders: a trap for a query without the filter
    db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)", (oid, cid, amount, status))
db.commit()
