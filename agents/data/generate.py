"""Generate the sample sales database shipped with the agents (deterministic).

Run ``python -m agents.data.generate [PATH]`` to rebuild ``agents/data/sales.sqlite``. The same
seed always gives the same rows (only the standard library's seeded ``random`` is used, and all
money is rounded to cents), so a regenerated file has exactly the content of the shipped one.

Schema (money in CNY yuan)::

    regions      (region_id, code, name_zh, name_en)
    customers    (customer_id, name, region_id, city, segment, signup_date)
    products     (product_id, sku, name, category, unit_price, unit_cost)
    orders       (order_id, customer_id, region_id, order_date, channel, status,
                  goods_amount, shipping_fee)          -- status: paid | refunded | cancelled
    order_items  (order_item_id, order_id, product_id, quantity, unit_price, discount)
    refunds      (refund_id, order_id, refund_date, amount, reason)

``orders.goods_amount`` is the sum of the order's items after discount (shipping excluded).
A refunded order has one full refund; some paid orders have a partial refund.
"""

from __future__ import annotations

import random
import sqlite3
import sys
from datetime import date, timedelta
from pathlib import Path

SEED = 20240101
DEFAULT_PATH = Path(__file__).with_name("sales.sqlite")
N_CUSTOMERS = 600
N_ORDERS = 9000
START, END = date(2023, 1, 1), date(2024, 12, 31)

SCHEMA = """
CREATE TABLE regions (
    region_id INTEGER PRIMARY KEY,
    code TEXT NOT NULL UNIQUE,
    name_zh TEXT NOT NULL,
    name_en TEXT NOT NULL
);
CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    region_id INTEGER NOT NULL REFERENCES regions(region_id),
    city TEXT NOT NULL,
    segment TEXT NOT NULL CHECK (segment IN ('enterprise', 'smb', 'consumer')),
    signup_date TEXT NOT NULL
);
CREATE TABLE products (
    product_id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    category TEXT NOT NULL,
    unit_price REAL NOT NULL,
    unit_cost REAL NOT NULL
);
CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
    region_id INTEGER NOT NULL REFERENCES regions(region_id),
    order_date TEXT NOT NULL,
    channel TEXT NOT NULL CHECK (channel IN ('online', 'store', 'distributor')),
    status TEXT NOT NULL CHECK (status IN ('paid', 'refunded', 'cancelled')),
    goods_amount REAL NOT NULL,
    shipping_fee REAL NOT NULL
);
CREATE TABLE order_items (
    order_item_id INTEGER PRIMARY KEY,
    order_id INTEGER NOT NULL REFERENCES orders(order_id),
    product_id INTEGER NOT NULL REFERENCES products(product_id),
    quantity INTEGER NOT NULL,
    unit_price REAL NOT NULL,
    discount REAL NOT NULL
);
CREATE TABLE refunds (
    refund_id INTEGER PRIMARY KEY,
    order_id INTEGER NOT NULL REFERENCES orders(order_id),
    refund_date TEXT NOT NULL,
    amount REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX orders_date ON orders (order_date);
CREATE INDEX orders_region ON orders (region_id);
CREATE INDEX items_order ON order_items (order_id);
CREATE INDEX refunds_order ON refunds (order_id);
"""

# code, name_zh, name_en, cities, weight of orders
REGIONS = [
    ("EAST", "华东", "East China", ["上海", "杭州", "南京", "苏州", "宁波"], 0.34),
    ("SOUTH", "华南", "South China", ["广州", "深圳", "厦门", "南宁"], 0.24),
    ("NORTH", "华北", "North China", ["北京", "天津", "石家庄", "太原"], 0.20),
    ("CENTRAL", "华中", "Central China", ["武汉", "长沙", "郑州"], 0.12),
    ("WEST", "西南", "Southwest China", ["成都", "重庆", "昆明"], 0.10),
]
# category, name, unit price (yuan), cost ratio
PRODUCTS = [
    ("办公设备", "激光打印机 LaserJet M200", 1899.0, 0.62),
    ("办公设备", "碎纸机 S12", 699.0, 0.55),
    ("办公设备", "投影仪 P500", 3299.0, 0.64),
    ("电脑配件", "机械键盘 K8", 429.0, 0.48),
    ("电脑配件", "无线鼠标 M3", 129.0, 0.41),
    ("电脑配件", "27寸显示器 U27", 1599.0, 0.7),
    ("电脑配件", "扩展坞 D10", 359.0, 0.5),
    ("办公家具", "人体工学椅 E1", 1299.0, 0.58),
    ("办公家具", "升降桌 H2", 2199.0, 0.6),
    ("办公家具", "文件柜 F4", 899.0, 0.52),
    ("耗材", "A4复印纸(箱)", 159.0, 0.72),
    ("耗材", "硒鼓 T200", 399.0, 0.45),
    ("耗材", "中性笔(盒)", 39.0, 0.35),
    ("软件服务", "协同办公年费 Team", 4800.0, 0.2),
    ("软件服务", "云存储 1TB 年费", 699.0, 0.25),
]
SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林罗高"
GIVEN = ["伟", "芳", "娜", "敏", "静", "磊", "洋", "勇", "艳", "杰", "涛", "明", "超", "霞", "平", "刚"]
COMPANY = ["科技", "贸易", "咨询", "制造", "物流", "传媒", "教育", "医疗"]
REFUND_REASONS = ["质量问题", "发错货", "客户取消", "物流损坏", "不想要了"]
SEASON = {1: 0.9, 2: 0.65, 3: 0.95, 4: 1.0, 5: 1.0, 6: 1.15, 7: 0.95, 8: 0.95, 9: 1.05, 10: 1.0, 11: 1.45, 12: 1.2}


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


def _pick_date(rng: random.Random) -> date:
    """A date in [START, END] with seasonality and ~18% year-over-year growth."""
    days = (END - START).days + 1
    while True:
        d = START + timedelta(days=rng.randrange(days))
        w = SEASON[d.month] * (1.18 if d.year == 2024 else 1.0)
        if rng.random() < w / (1.45 * 1.18):
            return d


def build(path: str | Path = DEFAULT_PATH, seed: int = SEED) -> Path:
    """Write a fresh database to ``path`` (replacing it). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    try:
        con.executescript(SCHEMA)
        con.executemany("INSERT INTO regions VALUES (?, ?, ?, ?)",
                        [(i + 1, c, zh, en) for i, (c, zh, en, _, _) in enumerate(REGIONS)])
        products = []
        for i, (cat, name, price, cost) in enumerate(PRODUCTS, 1):
            products.append((i, f"SKU-{i:04d}", name, cat, price, _money(price * cost)))
        con.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, ?)", products)

        region_weights = [r[4] for r in REGIONS]
        customers = []
        for cid in range(1, N_CUSTOMERS + 1):
            ridx = rng.choices(range(len(REGIONS)), region_weights)[0]
            seg = rng.choices(["enterprise", "smb", "consumer"], [0.2, 0.35, 0.45])[0]
            city = rng.choice(REGIONS[ridx][3])
            if seg == "consumer":
                name = rng.choice(SURNAMES) + rng.choice(GIVEN) + (rng.choice(GIVEN) if rng.random() < 0.5 else "")
            else:
                name = f"{city}{rng.choice(SURNAMES)}{rng.choice(GIVEN)}{rng.choice(COMPANY)}有限公司"
            signup = START - timedelta(days=365) + timedelta(days=rng.randrange(365 + 540))
            customers.append((cid, name, ridx + 1, city, seg, signup.isoformat()))
        con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?)", customers)

        orders, items, refunds = [], [], []
        item_id = refund_id = 0
        for oid in range(1, N_ORDERS + 1):
            cust = customers[rng.randrange(N_CUSTOMERS)]
            d = _pick_date(rng)
            if d.isoformat() < cust[5]:
                d = date.fromisoformat(cust[5]) + timedelta(days=rng.randrange(30))
                d = min(d, END)
            seg = cust[4]
            channel = rng.choices(["online", "store", "distributor"],
                                  [0.6, 0.3, 0.1] if seg == "consumer" else [0.45, 0.15, 0.4])[0]
            goods = 0.0
            for _ in range(rng.choices([1, 2, 3, 4], [0.45, 0.3, 0.17, 0.08])[0]):
                p = products[rng.randrange(len(products))]
                qty = rng.randint(1, 3) if seg == "consumer" else rng.randint(1, 12)
                disc = rng.choice([0.0, 0.0, 0.0, 0.05, 0.1, 0.15]) if seg != "consumer" else rng.choice([0.0, 0.0, 0.05])
                if d.month == 11 and 1 <= d.day <= 11:
                    disc = max(disc, 0.15)  # 双十一 promotion
                item_id += 1
                items.append((item_id, oid, p[0], qty, p[4], disc))
                goods += qty * p[4] * (1 - disc)
            goods = _money(goods)
            shipping = 0.0 if goods >= 299 or channel == "store" else 12.0
            r = rng.random()
            status = "cancelled" if r < 0.04 else "refunded" if r < 0.09 else "paid"
            orders.append((oid, cust[0], cust[2], d.isoformat(), channel, status, goods, shipping))
            if status == "refunded":
                refund_id += 1
                refunds.append((refund_id, oid, (d + timedelta(days=rng.randint(1, 20))).isoformat(),
                                goods, rng.choice(REFUND_REASONS)))
            elif status == "paid" and rng.random() < 0.04:
                refund_id += 1
                refunds.append((refund_id, oid, (d + timedelta(days=rng.randint(1, 30))).isoformat(),
                                _money(goods * rng.choice([0.1, 0.2, 0.3, 0.5])), rng.choice(REFUND_REASONS)))
        con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?)", orders)
        con.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?, ?, ?)", items)
        con.executemany("INSERT INTO refunds VALUES (?, ?, ?, ?, ?)", refunds)
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return path


def content_digest(path: str | Path) -> str:
    """A hash of every table's rows (independent of SQLite's file layout/version)."""
    import hashlib

    h = hashlib.sha256()
    con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for t in tables:
            h.update(t.encode())
            for row in con.execute(f'SELECT * FROM "{t}" ORDER BY 1'):
                h.update(repr(row).encode())
    finally:
        con.close()
    return h.hexdigest()


if __name__ == "__main__":  # pragma: no cover - a maintenance entry point
    out = build(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PATH)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB), digest {content_digest(out)[:16]}")
