"""Canonical values the write-path judge reads out of a memory, zh and en.

General vocabularies (chart types, currencies, cities, time zones, channels, SQL dialects ...),
not phrases taken from any evaluation pair: a value is recognised whatever sentence it sits in,
and "柱状图" / "bar chart", "北京时间" / "UTC+8" / "Shanghai time" map to one canonical value so
two memories can be compared across languages and wordings.

Keys are matched case-insensitively, as whole words for Latin script and as substrings for CJK.
A key may name values of several classes ("万元" is a scale and a currency).
"""

from __future__ import annotations

# class -> {surface form: canonical value}
VALUE_LEXICON: dict[str, dict[str, str]] = {
    "chart": {
        "柱状图": "bar", "条形图": "bar", "柱形图": "bar", "bar chart": "bar", "bar charts": "bar", "bar graph": "bar",
        "bar graphs": "bar", "column chart": "bar", "column charts": "bar", "histogram": "bar",
        "折线图": "line", "曲线图": "line", "趋势线": "line", "line chart": "line", "line charts": "line",
        "line graph": "line", "line graphs": "line", "trend line": "line",
        "饼图": "pie", "饼状图": "pie", "pie chart": "pie", "pie charts": "pie", "donut chart": "pie",
        "散点图": "scatter", "scatter plot": "scatter", "scatter plots": "scatter", "scatter chart": "scatter",
        "热力图": "heatmap", "heatmap": "heatmap", "heatmaps": "heatmap", "heat map": "heatmap",
        "面积图": "area", "area chart": "area", "area charts": "area",
        "表格": "table", "table view": "table", "plain table": "table",
        "雷达图": "radar", "radar chart": "radar", "漏斗图": "funnel", "funnel chart": "funnel",
        "瀑布图": "waterfall", "waterfall chart": "waterfall", "箱线图": "box", "box plot": "box",
    },
    "currency": {
        "人民币": "cny", "rmb": "cny", "cny": "cny", "元": "cny", "yuan": "cny", "¥": "cny", "块钱": "cny",
        "美元": "usd", "美金": "usd", "usd": "usd", "dollars": "usd", "dollar": "usd", "us$": "usd", "$": "usd",
        "欧元": "eur", "eur": "eur", "euros": "eur", "euro": "eur", "€": "eur",
        "日元": "jpy", "日币": "jpy", "jpy": "jpy", "yen": "jpy",
        "港币": "hkd", "港元": "hkd", "hkd": "hkd", "英镑": "gbp", "gbp": "gbp", "£": "gbp", "pounds sterling": "gbp",
        "新加坡元": "sgd", "新币": "sgd", "sgd": "sgd", "韩元": "krw", "krw": "krw",         "澳元": "aud", "aud": "aud", "加元": "cad", "cad": "cad", "瑞郎": "chf", "chf": "chf",
        "卢比": "inr", "inr": "inr", "rupees": "inr",
    },
    "scale": {
        "万元": "1e4", "万": "1e4", "ten thousand": "1e4", "ten-thousands": "1e4", "tens of thousands": "1e4",
        "亿元": "1e8", "亿": "1e8", "百万": "1e6", "million": "1e6", "millions": "1e6",         "千元": "1e3", "thousand": "1e3", "thousands": "1e3",         "billion": "1e9", "billions": "1e9", "bn": "1e9", "十亿": "1e9",
    },
    "format": {
        "csv": "csv", "excel": "xlsx", "xlsx": "xlsx", "xls": "xlsx", "spreadsheet": "xlsx", "电子表格": "xlsx",
        "pdf": "pdf", "ppt": "pptx", "pptx": "pptx", "powerpoint": "pptx", "slides": "pptx", "幻灯片": "pptx",
        "markdown": "md", "md": "md", "html": "html", "json": "json", "parquet": "parquet",         "docx": "docx", "word doc": "docx", "word document": "docx", "ms word": "docx", "png": "png", "jpg": "jpg", "jpeg": "jpg", "svg": "svg", "txt": "txt", "tsv": "tsv",
        "google sheets": "gsheet", "google sheet": "gsheet", "notion": "notion", "tableau": "tableau",
    },
    "frequency": {
        "每天": "daily", "每日": "daily", "天天": "daily", "daily": "daily", "every day": "daily", "each day": "daily",
        "once a day": "daily", "per day": "daily", "a day": "daily", "日报": "daily",
        "每周": "weekly", "每星期": "weekly", "每个星期": "weekly", "weekly": "weekly", "every week": "weekly",
        "once a week": "weekly", "per week": "weekly", "a week": "weekly", "周报": "weekly",
        "双周": "biweekly", "每两周": "biweekly", "biweekly": "biweekly", "every two weeks": "biweekly",
        "fortnightly": "biweekly", "every other week": "biweekly",
        "每月": "monthly", "每个月": "monthly", "monthly": "monthly", "every month": "monthly",
        "once a month": "monthly", "per month": "monthly", "a month": "monthly", "月报": "monthly",
        "每季度": "quarterly", "每个季度": "quarterly", "quarterly": "quarterly", "every quarter": "quarterly",
        "季报": "quarterly", "每年": "yearly", "yearly": "yearly", "annually": "yearly", "every year": "yearly",
        "年报": "yearly", "每小时": "hourly", "hourly": "hourly", "every hour": "hourly", "实时": "realtime",
        "real-time": "realtime", "realtime": "realtime", "real time": "realtime",
    },
    "language": {
        "中文": "zh", "汉语": "zh", "简体中文": "zh", "普通话": "zh", "chinese": "zh", "mandarin": "zh",
        "英文": "en", "英语": "en", "english": "en", "日文": "ja", "日语": "ja", "japanese": "ja",
        "韩语": "ko", "韩文": "ko", "korean": "ko", "德语": "de", "german": "de", "法语": "fr", "french": "fr",
        "西班牙语": "es", "spanish": "es", "繁体中文": "zh-hant", "traditional chinese": "zh-hant",
    },
    "weekday": {
        "周一": "mon", "星期一": "mon", "礼拜一": "mon", "monday": "mon", "mondays": "mon",         "周二": "tue", "星期二": "tue", "礼拜二": "tue", "tuesday": "tue", "tuesdays": "tue", "tue": "tue",
        "周三": "wed", "星期三": "wed", "礼拜三": "wed", "wednesday": "wed", "wednesdays": "wed",         "周四": "thu", "星期四": "thu", "礼拜四": "thu", "thursday": "thu", "thursdays": "thu", "thu": "thu",
        "周五": "fri", "星期五": "fri", "礼拜五": "fri", "friday": "fri", "fridays": "fri", "fri": "fri",
        "周六": "sat", "星期六": "sat", "礼拜六": "sat", "saturday": "sat", "saturdays": "sat",         "周日": "sun", "星期日": "sun", "星期天": "sun", "礼拜天": "sun", "周末": "weekend", "weekend": "weekend",
        "weekends": "weekend", "sunday": "sun", "sundays": "sun",         "工作日": "weekday", "weekdays": "weekday", "business days": "weekday", "business day": "weekday",
    },
    "month": {
        "january": "1", "february": "2", "march": "3", "april": "4", "june": "6", "july": "7",
        "august": "8", "september": "9", "october": "10", "november": "11", "december": "12",
        "feb": "2", "mar": "3", "apr": "4", "jun": "6", "jul": "7", "aug": "8", "sep": "9",
        "sept": "9", "oct": "10", "nov": "11", "dec": "12",
        "一月": "1", "二月": "2", "三月": "3", "四月": "4", "五月": "5", "六月": "6", "七月": "7", "八月": "8",
        "九月": "9", "十月": "10", "十一月": "11", "十二月": "12",
    },
    "period": {
        "q1": "q1", "q2": "q2", "q3": "q3", "q4": "q4", "一季度": "q1", "第一季度": "q1", "二季度": "q2",
        "第二季度": "q2", "三季度": "q3", "第三季度": "q3", "四季度": "q4", "第四季度": "q4",
        "h1": "h1", "h2": "h2", "上半年": "h1", "下半年": "h2", "first half": "h1", "second half": "h2",
        "ytd": "ytd", "年初至今": "ytd", "mtd": "mtd", "本月至今": "mtd",
        "上周": "last_week", "last week": "last_week", "本周": "this_week", "this week": "this_week",
        "上个月": "last_month", "上月": "last_month", "last month": "last_month", "本月": "this_month",
        "this month": "this_month", "去年": "last_year", "last year": "last_year", "今年": "this_year",
        "this year": "this_year", "明年": "next_year", "next year": "next_year", "下个月": "next_month",
        "next month": "next_month", "下周": "next_week", "next week": "next_week",
    },
    "polarity": {
        "不要": "no", "不用": "no", "不再": "no", "禁止": "no", "不允许": "no", "不得": "no", "关闭": "off",
        "开启": "on", "打开": "on", "启用": "on", "停用": "off", "允许": "yes",
        "don't": "no", "do not": "no", "never": "no", "stop": "no", "disable": "off", "disabled": "off",
        "enable": "on", "enabled": "on", "turn off": "off", "turn on": "on", "allowed": "yes", "not allowed": "no",
        "forbidden": "no", "prohibited": "no",
    },
    "sort": {
        "升序": "asc", "从小到大": "asc", "ascending": "asc", "降序": "desc", "从大到小": "desc", "从高到低": "desc",
        "从低到高": "asc", "descending": "desc", "highest first": "desc", "lowest first": "asc",
        "largest first": "desc", "smallest first": "asc", "newest first": "desc", "oldest first": "asc",
    },
    "color": {
        "红色": "red", "红": "red", "red": "red", "蓝色": "blue", "蓝": "blue", "blue": "blue", "navy": "navy",
        "藏青": "navy", "海军蓝": "navy", "深蓝": "navy", "绿色": "green", "green": "green", "黑色": "black",
        "black": "black", "白色": "white", "white": "white", "灰色": "grey", "grey": "grey", "gray": "grey",
        "橙色": "orange", "橘色": "orange", "orange": "orange", "紫色": "purple", "purple": "purple",
        "黄色": "yellow", "yellow": "yellow", "粉色": "pink", "pink": "pink", "金色": "gold", "gold": "gold",
        "teal": "teal", "青色": "teal", "brown": "brown", "棕色": "brown",
    },
    "theme": {
        "dark mode": "dark", "dark theme": "dark", "dark background": "dark", "dark backgrounds": "dark",
        "dark themes": "dark", "深色模式": "dark", "深色主题": "dark", "暗色": "dark", "深色背景": "dark",
        "黑色背景": "dark", "夜间模式": "dark", "light mode": "light", "light theme": "light",
        "light background": "light", "浅色模式": "light", "浅色主题": "light", "亮色": "light", "白色背景": "light",
        "浅色背景": "light",
    },
    "channel": {
        "email": "email", "e-mail": "email", "emails": "email", "邮件": "email", "邮箱": "email",
        "电子邮件": "email", "slack": "slack", "teams": "teams", "microsoft teams": "teams", "wechat": "wechat",
        "微信": "wechat", "企业微信": "wecom", "wecom": "wecom", "dingtalk": "dingtalk", "钉钉": "dingtalk",
        "feishu": "feishu", "lark": "feishu", "飞书": "feishu", "sms": "sms", "短信": "sms", "text message": "sms",
        "phone call": "phone", "电话": "phone", "whatsapp": "whatsapp", "telegram": "telegram", "zoom": "zoom",
        "腾讯会议": "tencent_meeting", "google meet": "meet", "jira": "jira", "confluence": "confluence",
    },
    "dialect": {
        "postgres": "postgres", "postgresql": "postgres", "pg": "postgres", "mysql": "mysql",
        "snowflake": "snowflake", "bigquery": "bigquery", "big query": "bigquery", "hive": "hive",
        "hiveql": "hive", "spark sql": "spark", "sparksql": "spark", "spark": "spark", "clickhouse": "clickhouse",
        "oracle": "oracle", "sql server": "mssql", "mssql": "mssql", "t-sql": "mssql", "presto": "presto",
        "trino": "presto", "redshift": "redshift", "duckdb": "duckdb", "sqlite": "sqlite", "doris": "doris",
        "starrocks": "starrocks", "maxcompute": "maxcompute", "odps": "maxcompute", "databricks": "databricks",
        "python": "python", "pandas": "pandas", "r语言": "r", "excel公式": "excel",
    },
    "units": {
        "metric": "metric", "公制": "metric", "imperial": "imperial", "英制": "imperial",
        "celsius": "celsius", "摄氏": "celsius", "fahrenheit": "fahrenheit", "华氏": "fahrenheit",
        "kilometers": "km", "kilometres": "km", "km": "km", "公里": "km", "miles": "mile", "mile": "mile",
        "英里": "mile", "kg": "kg", "kilograms": "kg", "公斤": "kg", "千克": "kg", "lbs": "lb", "磅": "lb",
    },
    "date_format": {
        "yyyy-mm-dd": "ymd", "iso 8601": "ymd", "iso-8601": "ymd", "iso format": "ymd", "iso dates": "ymd",
        "dd/mm/yyyy": "dmy", "dd-mm-yyyy": "dmy", "day/month/year": "dmy", "mm/dd/yyyy": "mdy",
        "month/day/year": "mdy", "年月日": "ymd",
    },
    "region": {
        "华东": "east_china", "华南": "south_china", "华北": "north_china", "华中": "central_china",
        "西南": "southwest_china", "西北": "northwest_china", "东北": "northeast_china",
        "east china": "east_china", "south china": "south_china", "north china": "north_china",
        "central china": "central_china", "southwest china": "southwest_china",
        "northwest china": "northwest_china", "northeast china": "northeast_china",
        "apac": "apac", "亚太": "apac", "asia pacific": "apac", "asia-pacific": "apac", "emea": "emea",
        "北美": "north_america", "north america": "north_america", "latam": "latam",
        "拉美": "latam", "latin america": "latam", "欧洲": "europe", "europe": "europe", "eu": "europe",
        "东南亚": "sea", "southeast asia": "sea", "中东": "middle_east", "middle east": "middle_east",
        "北区": "north", "南区": "south", "东区": "east", "西区": "west",
        "north region": "north", "south region": "south", "east region": "east", "west region": "west",
        "northern region": "north", "southern region": "south", "eastern region": "east", "western region": "west",
        "国内": "domestic", "domestic": "domestic", "海外": "overseas", "overseas": "overseas",
        "international": "overseas", "国际": "overseas",
    },
    "country": {
        "中国": "cn", "china": "cn", "mainland china": "cn", "中国大陆": "cn", "美国": "us", "usa": "us",
        "united states": "us", "the us": "us", "u.s.": "us", "日本": "jp", "japan": "jp", "韩国": "kr",
        "korea": "kr", "south korea": "kr", "德国": "de", "germany": "de", "法国": "fr", "france": "fr",
        "英国": "uk", "uk": "uk", "united kingdom": "uk", "britain": "uk", "新加坡": "sg",
        "印度": "in", "india": "in", "澳大利亚": "au", "australia": "au", "加拿大": "ca", "canada": "ca",
        "巴西": "br", "brazil": "br", "越南": "vn", "vietnam": "vn", "泰国": "th", "thailand": "th",
        "印尼": "id", "印度尼西亚": "id", "indonesia": "id", "马来西亚": "my", "malaysia": "my",
        "荷兰": "nl", "netherlands": "nl", "西班牙": "es", "spain": "es", "意大利": "it", "italy": "it",
        "墨西哥": "mx", "mexico": "mx", "阿联酋": "ae", "uae": "ae", "台湾": "tw", "taiwan": "tw",
        "香港特区": "hk", "瑞士": "ch", "switzerland": "ch", "爱尔兰": "ie", "ireland": "ie",
    },
    "channel_sales": {
        "线上": "online", "online": "online", "电商": "online", "e-commerce": "online", "ecommerce": "online",
        "线下": "offline", "offline": "offline", "门店": "store", "in-store": "store", "retail stores": "store",
        "app端": "app", "小程序": "miniprogram", "mini program": "miniprogram", "wholesale": "wholesale",
        "批发": "wholesale", "经销商": "dealer", "distributors": "dealer", "dealers": "dealer",
        "b2b": "b2b", "b2c": "b2c", "ios": "ios", "android": "android", "安卓": "android", "web端": "web",
        "desktop": "desktop", "桌面端": "desktop", "mobile": "mobile", "移动端": "mobile",
    },
}

# Cities, with their UTC offset: a city states a location, and in a sentence about time it
# also states a time zone ("Shanghai time" = UTC+8).
CITIES: dict[str, tuple[str, str]] = {
    "北京": ("beijing", "utc+8"), "beijing": ("beijing", "utc+8"), "上海": ("shanghai", "utc+8"),
    "shanghai": ("shanghai", "utc+8"), "深圳": ("shenzhen", "utc+8"), "shenzhen": ("shenzhen", "utc+8"),
    "广州": ("guangzhou", "utc+8"), "guangzhou": ("guangzhou", "utc+8"), "杭州": ("hangzhou", "utc+8"),
    "hangzhou": ("hangzhou", "utc+8"), "成都": ("chengdu", "utc+8"), "chengdu": ("chengdu", "utc+8"),
    "武汉": ("wuhan", "utc+8"), "wuhan": ("wuhan", "utc+8"), "南京": ("nanjing", "utc+8"),
    "nanjing": ("nanjing", "utc+8"), "西安": ("xian", "utc+8"), "xi'an": ("xian", "utc+8"), "xian": ("xian", "utc+8"),
    "苏州": ("suzhou", "utc+8"), "suzhou": ("suzhou", "utc+8"), "天津": ("tianjin", "utc+8"),
    "tianjin": ("tianjin", "utc+8"), "重庆": ("chongqing", "utc+8"), "chongqing": ("chongqing", "utc+8"),
    "厦门": ("xiamen", "utc+8"), "xiamen": ("xiamen", "utc+8"), "青岛": ("qingdao", "utc+8"),
    "qingdao": ("qingdao", "utc+8"), "长沙": ("changsha", "utc+8"), "changsha": ("changsha", "utc+8"),
    "香港": ("hongkong", "utc+8"), "hong kong": ("hongkong", "utc+8"), "hk": ("hongkong", "utc+8"),
    "台北": ("taipei", "utc+8"), "taipei": ("taipei", "utc+8"), "新加坡": ("singapore", "utc+8"),
    "singapore": ("singapore", "utc+8"), "吉隆坡": ("kualalumpur", "utc+8"), "kuala lumpur": ("kualalumpur", "utc+8"),
    "东京": ("tokyo", "utc+9"), "tokyo": ("tokyo", "utc+9"), "大阪": ("osaka", "utc+9"), "osaka": ("osaka", "utc+9"),
    "首尔": ("seoul", "utc+9"), "seoul": ("seoul", "utc+9"), "悉尼": ("sydney", "utc+10"),
    "sydney": ("sydney", "utc+10"), "墨尔本": ("melbourne", "utc+10"), "melbourne": ("melbourne", "utc+10"),
    "曼谷": ("bangkok", "utc+7"), "bangkok": ("bangkok", "utc+7"), "雅加达": ("jakarta", "utc+7"),
    "jakarta": ("jakarta", "utc+7"), "胡志明市": ("hcmc", "utc+7"), "ho chi minh city": ("hcmc", "utc+7"),
    "班加罗尔": ("bangalore", "utc+5:30"), "bangalore": ("bangalore", "utc+5:30"),
    "bengaluru": ("bangalore", "utc+5:30"), "孟买": ("mumbai", "utc+5:30"), "mumbai": ("mumbai", "utc+5:30"),
    "德里": ("delhi", "utc+5:30"), "delhi": ("delhi", "utc+5:30"), "迪拜": ("dubai", "utc+4"),
    "dubai": ("dubai", "utc+4"), "伦敦": ("london", "utc+0"), "london": ("london", "utc+0"),
    "都柏林": ("dublin", "utc+0"), "dublin": ("dublin", "utc+0"), "里斯本": ("lisbon", "utc+0"),
    "lisbon": ("lisbon", "utc+0"), "巴黎": ("paris", "utc+1"), "paris": ("paris", "utc+1"),
    "柏林": ("berlin", "utc+1"), "berlin": ("berlin", "utc+1"), "慕尼黑": ("munich", "utc+1"),
    "munich": ("munich", "utc+1"), "法兰克福": ("frankfurt", "utc+1"), "frankfurt": ("frankfurt", "utc+1"),
    "阿姆斯特丹": ("amsterdam", "utc+1"), "amsterdam": ("amsterdam", "utc+1"), "马德里": ("madrid", "utc+1"),
    "madrid": ("madrid", "utc+1"), "巴塞罗那": ("barcelona", "utc+1"), "barcelona": ("barcelona", "utc+1"),
    "罗马": ("rome", "utc+1"), "rome": ("rome", "utc+1"), "米兰": ("milan", "utc+1"), "milan": ("milan", "utc+1"),
    "苏黎世": ("zurich", "utc+1"), "zurich": ("zurich", "utc+1"), "斯德哥尔摩": ("stockholm", "utc+1"),
    "stockholm": ("stockholm", "utc+1"), "华沙": ("warsaw", "utc+1"), "warsaw": ("warsaw", "utc+1"),
    "布拉格": ("prague", "utc+1"), "prague": ("prague", "utc+1"), "维也纳": ("vienna", "utc+1"),
    "vienna": ("vienna", "utc+1"), "赫尔辛基": ("helsinki", "utc+2"), "helsinki": ("helsinki", "utc+2"),
    "雅典": ("athens", "utc+2"), "athens": ("athens", "utc+2"), "伊斯坦布尔": ("istanbul", "utc+3"),
    "istanbul": ("istanbul", "utc+3"), "莫斯科": ("moscow", "utc+3"), "moscow": ("moscow", "utc+3"),
    "纽约": ("newyork", "utc-5"), "new york": ("newyork", "utc-5"), "nyc": ("newyork", "utc-5"),
    "波士顿": ("boston", "utc-5"), "boston": ("boston", "utc-5"), "多伦多": ("toronto", "utc-5"),
    "toronto": ("toronto", "utc-5"), "华盛顿": ("washington", "utc-5"), "washington": ("washington", "utc-5"),
    "迈阿密": ("miami", "utc-5"), "miami": ("miami", "utc-5"), "亚特兰大": ("atlanta", "utc-5"),
    "atlanta": ("atlanta", "utc-5"), "芝加哥": ("chicago", "utc-6"), "chicago": ("chicago", "utc-6"),
    "奥斯汀": ("austin", "utc-6"), "austin": ("austin", "utc-6"), "达拉斯": ("dallas", "utc-6"),
    "dallas": ("dallas", "utc-6"), "墨西哥城": ("mexicocity", "utc-6"), "mexico city": ("mexicocity", "utc-6"),
    "丹佛": ("denver", "utc-7"), "denver": ("denver", "utc-7"), "旧金山": ("sanfrancisco", "utc-8"),
    "san francisco": ("sanfrancisco", "utc-8"), "洛杉矶": ("losangeles", "utc-8"),
    "los angeles": ("losangeles", "utc-8"), "西雅图": ("seattle", "utc-8"),
    "seattle": ("seattle", "utc-8"), "温哥华": ("vancouver", "utc-8"), "vancouver": ("vancouver", "utc-8"),
    "硅谷": ("siliconvalley", "utc-8"), "silicon valley": ("siliconvalley", "utc-8"),
    "圣保罗": ("saopaulo", "utc-3"), "são paulo": ("saopaulo", "utc-3"), "sao paulo": ("saopaulo", "utc-3"),
}

# Time-zone names and abbreviations -> UTC offset (standard time; DST variants map to the same zone).
TIMEZONES: dict[str, str] = {
    "北京时间": "utc+8", "东八区": "utc+8", "中国时间": "utc+8", "china time": "utc+8",
    "china standard time": "utc+8", "hkt": "utc+8", "sgt": "utc+8", "jst": "utc+9", "日本时间": "utc+9",
    "kst": "utc+9", "aest": "utc+10", "ist": "utc+5:30", "india time": "utc+5:30",
    "utc": "utc+0", "gmt": "utc+0", "协调世界时": "utc+0", "格林尼治时间": "utc+0", "bst": "utc+0",
    "uk time": "utc+0", "zulu": "utc+0", "cet": "utc+1", "cest": "utc+1", "central european time": "utc+1",
    "欧洲中部时间": "utc+1", "eet": "utc+2", "msk": "utc+3",
    "est": "utc-5", "edt": "utc-5", "eastern time": "utc-5", "us eastern": "utc-5", "美东时间": "utc-5",
    "美东": "utc-5", "cst": "utc-6", "cdt": "utc-6", "central time": "utc-6", "美中": "utc-6",
    "mst": "utc-7", "mdt": "utc-7", "mountain time": "utc-7", "pst": "utc-8", "pdt": "utc-8",
    "pacific time": "utc-8", "us pacific": "utc-8", "美西时间": "utc-8", "美西": "utc-8", }

# Words that make a city in the same sentence a time zone ("times in Shanghai time", "按伦敦时间").
TIME_WORDS = ("time zone", "timezone", "时区", "时间", " time", "hours", "clock", "o'clock")

# Decimal places, stated as words: "two decimals", "round to cents", "保留两位小数", "取整".
DECIMALS: dict[str, str] = {
    "round to cents": "2", "to cents": "2", "in cents": "2", "to the nearest cent": "2", "to the cent": "2", "nearest cent": "2", "精确到分": "2",
    "two decimals": "2", "two decimal places": "2", "2 decimals": "2", "2 decimal places": "2", "2dp": "2",
    "2 dp": "2", "两位小数": "2", "2位小数": "2", "二位小数": "2", "小数点后两位": "2",
    "one decimal": "1", "one decimal place": "1", "1 decimal": "1", "1 decimal place": "1", "1dp": "1",
    "一位小数": "1", "1位小数": "1", "小数点后一位": "1", "精确到角": "1",
    "three decimals": "3", "three decimal places": "3", "3 decimals": "3", "3 decimal places": "3",
    "三位小数": "3", "3位小数": "3", "four decimals": "4", "four decimal places": "4", "四位小数": "4",
    "no decimals": "0", "without decimals": "0", "whole numbers": "0", "whole number": "0",
    "round to integers": "0", "integers only": "0", "取整": "0", "保留整数": "0", "不要小数": "0",
    "不保留小数": "0", "整数": "0",
}

# Keys naming values of more than one class.
EXTRA_VALUES: dict[str, list[tuple[str, str]]] = {
    "万元": [("currency", "cny")], "亿元": [("currency", "cny")], "千元": [("currency", "cny")],
}
