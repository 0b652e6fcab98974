"""A generated intent-classification corpus: the offline stand-in for BANKING77 / CLINC150.

No text-classification data set can be downloaded on the machines this project runs on,
and none ships on PyPI, so the embedded default trains on sentences generated here:
48 intents in 12 domains (a domain is a "task" for the pathological partition). Each
sentence is a template of its intent with slots filled from the domain's vocabulary,
wrapped in a politeness prefix and a suffix, with occasional synonym swaps. Intents of a
domain share vocabulary (``check_balance`` and ``transfer_money`` both talk about
accounts and amounts), so the classifier has to read the verb and the structure, not one
keyword; a client that saw one intent of a domain mislabels its neighbours, which is what
makes the aggregation rule matter under label skew.

Everything is deterministic from the seed; the test split uses held-out slot and prefix
combinations of the same templates (no sentence is in both splits).
"""

from __future__ import annotations

import random

__all__ = ["DOMAINS", "generate_intents", "vocabulary"]

_PREFIXES = ["", "", "", "please ", "hey, ", "could you ", "can you ", "i need you to ", "i want to ",
             "would you ", "quick question: ", "hi there, ", "assistant, ", "i'd like to ", "help me "]
_SUFFIXES = ["", "", "", " please", " thanks", " right now", " for me", " asap", " when you can",
             " thank you", " if possible", " today"]
_SYNONYMS = {"show": ["display", "tell me", "give me"], "send": ["move", "wire"], "cancel": ["stop", "call off"],
             "book": ["reserve", "get"], "play": ["put on", "start"], "turn on": ["switch on", "power on"],
             "turn off": ["switch off", "shut off"], "find": ["look up", "search for"], "set": ["create", "make"],
             "what is": ["what's", "tell me"], "how much": ["what amount"], "remove": ["delete", "take off"]}

_SLOTS = {
    "account": ["checking", "savings", "joint", "business", "student", "credit card"],
    "amount": ["$20", "$50", "100 dollars", "$250", "five hundred euros", "$1,000", "thirty pounds", "$75"],
    "person": ["mom", "my brother", "alex", "sarah", "my landlord", "john", "the babysitter", "my roommate"],
    "merchant": ["amazon", "the gas station", "starbucks", "walmart", "netflix", "the pharmacy", "uber"],
    "city": ["paris", "tokyo", "new york", "berlin", "chicago", "madrid", "seattle", "rome", "boston", "lima"],
    "date": ["tomorrow", "next friday", "on monday", "this weekend", "on june 3rd", "next week", "tonight"],
    "time": ["7 am", "noon", "6:30 pm", "9 o'clock", "half past eight", "10 pm", "midnight"],
    "song": ["bohemian rhapsody", "some jazz", "the new taylor swift album", "lo-fi beats", "my workout playlist",
             "classical music", "the beatles", "something relaxing"],
    "room": ["kitchen", "living room", "bedroom", "garage", "office", "bathroom", "hallway"],
    "device": ["lights", "heater", "fan", "tv", "air conditioner", "coffee machine", "speaker"],
    "food": ["pizza", "sushi", "pad thai", "a burger", "tacos", "a salad", "ramen", "curry"],
    "item": ["milk", "eggs", "bread", "batteries", "dish soap", "coffee beans", "paper towels", "apples"],
    "event": ["dentist appointment", "team meeting", "dinner with sarah", "yoga class", "doctor visit",
              "standup", "birthday party"],
    "topic": ["sports", "politics", "technology", "the stock market", "science", "local news", "business"],
    "number": ["two", "three", "four", "5", "six", "10", "twenty"],
    "unit": ["miles", "kilometers", "pounds", "kilograms", "cups", "liters", "inches"],
    "language": ["spanish", "french", "german", "japanese", "italian", "korean", "portuguese"],
    "phrase": ["good morning", "where is the train station", "thank you very much", "how much does it cost",
               "i am lost", "nice to meet you", "see you later"],
    "car_part": ["tires", "oil", "brakes", "battery", "engine light", "windshield wipers"],
    "ingredient": ["chicken", "tofu", "pasta", "rice", "salmon", "lentils", "mushrooms"],
}

DOMAINS: dict[str, dict[str, list[str]]] = {
    "banking": {
        "check_balance": ["how much money is in my {account} account", "show my {account} balance",
                          "what is the balance on my {account} account", "do i have enough in {account} to spend {amount}",
                          "balance of {account}"],
        "transfer_money": ["send {amount} from my {account} account to {person}", "transfer {amount} to {person}",
                           "move {amount} into my {account} account", "pay {person} {amount} from {account}",
                           "wire {amount} to {person} {date}"],
        "recent_transactions": ["show my last transactions on {account}", "what did i spend at {merchant}",
                                "list the charges from {merchant} on my {account} account",
                                "did {merchant} charge me {date}", "find my recent purchases at {merchant}"],
        "card_lost": ["i lost my {account} card", "my card was stolen at {merchant}", "block my {account} card",
                      "someone took my wallet, freeze the {account} card", "report a missing card"],
    },
    "travel": {
        "book_flight": ["book a flight to {city} {date}", "find me flights from {city} to {city}",
                        "i need a plane ticket to {city} leaving {date}", "get me on a flight to {city} at {time}",
                        "reserve a seat on the {time} flight to {city}"],
        "book_hotel": ["book a hotel in {city} {date}", "find a room in {city} for {number} nights",
                       "i need a place to stay in {city}", "reserve a hotel near downtown {city}",
                       "get me a double room in {city} {date}"],
        "flight_status": ["is my flight to {city} on time", "has the {time} flight from {city} been delayed",
                          "check the status of my flight {date}", "when does my plane to {city} land",
                          "which gate does the flight to {city} leave from"],
        "travel_advice": ["do i need a visa for {city}", "what should i pack for {city} {date}",
                          "is it safe to travel to {city}", "what are the entry rules for {city}",
                          "what vaccines do i need before going to {city}"],
    },
    "home": {
        "lights_on": ["turn on the {room} lights", "switch on the lights in the {room}",
                      "make the {room} brighter", "lights on in the {room}", "i can't see in the {room}, light it up"],
        "lights_off": ["turn off the {room} lights", "switch off the lights in the {room}",
                       "make the {room} dark", "lights off in the {room}", "kill the lights in the {room} at {time}"],
        "thermostat": ["set the temperature in the {room} to {number} degrees", "make the {room} warmer",
                       "it's too cold in the {room}", "lower the heat in the {room}", "turn the thermostat up by {number}"],
        "device_control": ["turn on the {device} in the {room}", "start the {device}", "turn off the {device}",
                           "is the {device} in the {room} still running", "switch the {device} off at {time}"],
    },
    "music": {
        "play_music": ["play {song}", "put on {song} in the {room}", "i want to hear {song}",
                       "start playing {song} at {time}", "can we listen to {song}"],
        "volume": ["turn the music up", "make it quieter", "set the volume to {number}",
                   "lower the volume in the {room}", "the music is too loud"],
        "skip_song": ["skip this song", "next track", "play the next one", "i don't like this, skip it",
                      "go back to the previous song"],
        "song_info": ["what song is this", "who sings this song", "what album is {song} from",
                      "name of the song playing in the {room}", "when was {song} released"],
    },
    "weather": {
        "weather_now": ["what's the weather in {city}", "is it raining in {city} right now", "how hot is it in {city}",
                        "current temperature in {city}", "is it cold outside"],
        "weather_forecast": ["what's the forecast for {city} {date}", "will it rain {date}",
                             "is it going to snow in {city} {date}", "weather for {city} next week",
                             "do i need an umbrella {date}"],
        "sunrise_sunset": ["when is sunset in {city}", "what time does the sun rise {date}",
                           "how long is daylight in {city} {date}", "when does it get dark tonight",
                           "sunrise time in {city}"],
        "air_quality": ["how is the air quality in {city}", "is the pollen count high {date}",
                        "is it safe to run outside in {city}", "what's the smog level today",
                        "uv index in {city} {date}"],
    },
    "calendar": {
        "add_event": ["add a {event} {date} at {time}", "put {event} on my calendar for {date}",
                      "schedule a {event} at {time}", "create an event called {event} {date}",
                      "remind me of the {event} {date}"],
        "cancel_event": ["cancel my {event} {date}", "remove the {event} from my calendar",
                         "i can't make the {event}, delete it", "call off the {event} at {time}",
                         "clear my {event} {date}"],
        "next_event": ["what's my next meeting", "what do i have {date}", "when is my {event}",
                       "am i free at {time} {date}", "what is on my calendar {date}"],
        "set_alarm": ["set an alarm for {time}", "wake me up at {time} {date}", "alarm at {time} please",
                      "i need to get up at {time}", "create a {time} alarm for {date}"],
    },
    "food": {
        "order_food": ["order {food} from the usual place", "i want {food} delivered at {time}",
                       "get me {food} for dinner", "place an order for {number} {food}", "can i get {food} delivered"],
        "restaurant_booking": ["book a table for {number} {date} at {time}", "reserve a table at a {food} place in {city}",
                               "get us a dinner reservation for {number} people", "is there a table free {date} at {time}",
                               "find a restaurant with {food} near me and book it"],
        "recipe": ["how do i cook {ingredient}", "give me a recipe with {ingredient} and {ingredient}",
                   "what can i make with {ingredient}", "how long do i bake {ingredient}",
                   "find a quick {ingredient} recipe"],
        "calories": ["how many calories in {food}", "is {food} healthy", "nutrition facts for {food}",
                     "how much protein is in {ingredient}", "how much sugar does {food} have"],
    },
    "shopping": {
        "add_to_list": ["add {item} to my shopping list", "put {item} and {item} on the list",
                        "i need to buy {item}", "remember to get {item}", "we are out of {item}"],
        "remove_from_list": ["remove {item} from my shopping list", "take {item} off the list",
                             "i already bought {item}", "delete {item} from the grocery list", "cross off {item}"],
        "order_status": ["where is my package", "has my order from {merchant} shipped", "track my delivery",
                         "when will my {merchant} order arrive", "my package from {merchant} is late"],
        "return_item": ["i want to return the {item}", "how do i send back my order from {merchant}",
                        "start a return for {item}", "refund the {item} i bought at {merchant}",
                        "the {item} arrived broken, i want my money back"],
    },
    "news": {
        "headlines": ["what's in the news", "give me today's headlines", "top stories {date}",
                      "what happened in {city} today", "read me the latest news"],
        "news_topic": ["any news about {topic}", "latest {topic} news", "what's new in {topic}",
                       "give me the {topic} headlines", "update me on {topic}"],
        "stock_price": ["how is the stock market doing", "what's the price of apple stock",
                        "did the dow go up {date}", "how are my stocks", "check the nasdaq"],
        "sports_score": ["what was the score of the game", "did {city} win {date}", "who won the match last night",
                         "score of the {city} game", "when do {city} play next"],
    },
    "utility": {
        "convert_units": ["how many {unit} in {number} {unit}", "convert {number} {unit} to {unit}",
                          "what is {number} {unit} in {unit}", "change {number} {unit} into {unit}",
                          "{number} {unit} equals how many {unit}"],
        "calculator": ["what is {number} times {number}", "add {number} and {number}",
                       "divide {number} by {number}", "what's {number} percent of {amount}",
                       "calculate {number} plus {number}"],
        "timer": ["set a timer for {number} minutes", "start a {number} minute timer",
                  "how much time is left on the timer", "cancel the timer", "time {number} minutes for the pasta"],
        "time_query": ["what time is it", "what time is it in {city}", "what's the date today",
                       "what day is it {date}", "how many hours ahead is {city}"],
    },
    "language": {
        "translate": ["how do you say {phrase} in {language}", "translate {phrase} to {language}",
                      "what is {phrase} in {language}", "say {phrase} in {language}", "{language} for {phrase}"],
        "define_word": ["what does serendipity mean", "define the word {topic}", "what is the meaning of ubiquitous",
                        "give me the definition of {item}", "explain the word ephemeral"],
        "spelling": ["how do you spell {city}", "spell {ingredient} for me", "is it spelled {city} or something else",
                     "what's the spelling of necessary", "spell out {language}"],
        "synonym": ["give me another word for happy", "what's a synonym for {topic}", "a different word for big",
                    "what word means the same as fast", "other ways to say {phrase}"],
    },
    "auto": {
        "car_service": ["book a service for my car", "my {car_part} need checking", "when is my car due for {car_part}",
                        "schedule an appointment to fix the {car_part}", "find a mechanic for my {car_part} {date}"],
        "gas_station": ["where is the nearest gas station", "find cheap gas near me",
                        "i am running out of fuel", "how far is the next gas station on the way to {city}",
                        "gas prices in {city}"],
        "traffic": ["how is the traffic to {city}", "is there traffic on my way to work",
                    "how long will it take to drive to {city} at {time}", "any accidents on the highway",
                    "best route to {city} avoiding traffic"],
        "parking": ["where can i park in {city}", "find a parking spot near the {event}",
                    "how much is parking downtown", "remember where i parked", "is there free parking {date}"],
    },
}


def _fill(template: str, rng: random.Random) -> str:
    out = template
    while "{" in out:
        start = out.index("{")
        end = out.index("}", start)
        out = out[:start] + rng.choice(_SLOTS[out[start + 1:end]]) + out[end + 1:]
    return out


def _synonyms(text: str, rng: random.Random, p: float) -> str:
    for word, alts in _SYNONYMS.items():
        if (text.startswith(word + " ") or f" {word} " in text) and rng.random() < p:
            text = text.replace(word, rng.choice(alts), 1)
    return text


def generate_intents(seed: int = 42, train_per_intent: int = 100, test_per_intent: int = 30
                     ) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]], list[str]]:
    """The generated corpus: ``(train, test, label_names)``.

    ``train`` and ``test`` are lists of ``(text, label, task)`` with ``task`` the intent's
    domain; labels index ``label_names`` (48 intents, domain by domain). The sentences of
    one intent are distinct, and none occurs in both splits. Deterministic from ``seed``.
    """
    for name, v in (("train_per_intent", train_per_intent), ("test_per_intent", test_per_intent)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}(={v!r}) must be a positive int")
    rng = random.Random(seed)
    train, test, names = [], [], []
    for domain, intents in DOMAINS.items():
        for intent, templates in intents.items():
            label = len(names)
            names.append(intent)
            want = train_per_intent + test_per_intent
            seen: set[str] = set()
            made: list[str] = []
            tries = 0
            while len(made) < want:
                tries += 1
                if tries > 200 * want:
                    raise RuntimeError(f"intent {intent!r} cannot produce {want} distinct sentences; "
                                       f"lower train_per_intent / test_per_intent")
                core = _synonyms(_fill(rng.choice(templates), rng), rng, p=0.3)
                text = (rng.choice(_PREFIXES) + core + rng.choice(_SUFFIXES)).strip()
                if rng.random() < 0.15:
                    text = text.capitalize() + rng.choice(["?", ".", "!"])
                if text not in seen:
                    seen.add(text)
                    made.append(text)
            train += [(t, label, domain) for t in made[:train_per_intent]]
            test += [(t, label, domain) for t in made[train_per_intent:]]
    order = list(range(len(train)))
    rng.shuffle(order)
    train = [train[i] for i in order]
    return train, test, names


def vocabulary() -> list[str]:
    """Every lower-case word and punctuation mark the generator can emit, sorted.

    The word-level vocabulary of the tiny random BERT (:data:`fraq.federated.model.TINY_MODEL`).
    """
    import re

    pieces = list(_PREFIXES) + list(_SUFFIXES) + ["? . !"]
    pieces += [a for alts in _SYNONYMS.values() for a in alts] + list(_SYNONYMS)
    pieces += [v for vals in _SLOTS.values() for v in vals]
    pieces += [re.sub(r"\{\w+\}", " ", t) for intents in DOMAINS.values() for ts in intents.values() for t in ts]
    return sorted({w for p in pieces for w in re.findall(r"\w+|[^\w\s]", p.lower())})
