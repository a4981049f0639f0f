"""Small vendored vocabularies for the synthetic tasks (no download; RULER uses wonderwords' lists)."""
from __future__ import annotations

ADJECTIVES = """able acid angry aware bad bent best big bitter black blue bold brave brief bright
broad broken brown busy calm cheap chief clean clear close cold cool crazy cruel curly damp dark
dear deep dense dirty dry dull eager early easy empty equal even exact fair false fancy fast fat
fine firm flat fresh full funny gentle giant glad gold good grand gray great green happy hard
harsh heavy high hollow honest hot huge humble icy ideal jolly keen kind large late lazy left
light little live long loose loud low lucky mad major mild modern moist narrow near neat new nice
noble odd old open orange pale plain polite poor proud pure quick quiet rapid rare raw real red
rich right rough round royal rude sad safe salty sharp shiny short shy silent silly simple slim
slow small smart smooth soft solid sour spare steep stiff still strange strict strong sweet swift
tall tame tender thick thin tidy tight tiny tough true ugly vast warm weak wet white wide wild
wise witty wooden young""".split()

NOUNS = """acorn actor anchor angle apple arrow attic badge bagel ball banana band barn basket
beach bean bear bell bench berry bird blanket boat bone book boot bottle bowl box branch bread
brick bridge broom brush bucket button cabin cable cake camel camera candle canoe canyon cap car
carpet castle cat chair chalk cheese cherry chest circle city cliff clock cloud coat coin comet
cookie copper corn cotton cow crab crown cup curtain daisy desk diamond dog door dragon drum duck
eagle engine feather fence field finger flag flute fork fox frog garden gate ghost glass glove
goat grape guitar hammer harbor hat hill honey horse house island jacket jar jewel kettle key
kite knife ladder lake lamp leaf lemon lion lizard map marble mask meadow mirror monkey moon
mountain mouse needle nest ocean onion orchard owl paint palace panda paper pearl pencil piano
pillow planet plate pocket pond potato queen rabbit radio river robot rocket rope rose saddle
sail salt shell ship shoe silver sock spoon star stone sugar sun table tiger tower train tree
truck tulip turtle umbrella valley violin wagon wall whale wheel window wolf zebra""".split()

VERBS = """accept allow answer argue arrive ask bake borrow build buy call carry catch change
clean climb close collect cook count cover cross cut dance decide deliver describe design dig
draw dream drink drive drop earn eat enjoy enter explain fill find fix fold follow gather give
grow guess help hold hunt join jump keep kick knock laugh learn leave lift listen look love make
mark measure meet mix move open order paint pick plant play point pour pull push reach read
remember repair rest return ride ring run save search sell send share shout sing sit sleep smile
speak stand start stay swim talk taste teach tell think throw touch travel try turn visit walk
want wash watch win wonder work write""".split()

FIRST_NAMES = """Ada Alan Alice Amir Anna Arjun Ben Bianca Carl Chen Clara Dario Dina Eli Emma Erik
Farah Felix Gina Hana Hugo Ines Ivan Jana Jonas Kai Kira Lena Leo Lina Luca Maya Milo Nadia Nico
Nina Omar Otto Paula Pedro Rita Rosa Sami Sara Tara Theo Uma Vera Yara Zoe""".split()
LAST_NAMES = """Abbott Barker Castillo Dorsey Ellison Fischer Garner Holt Ibarra Jansen Keller Lowe
Moreno Nash Olsen Porter Quinn Reyes Sato Tanaka Ulrich Vance Weber Young Zimmer""".split()
CITIES = """Aberdeen Bergen Calgary Dresden Eindhoven Florence Geneva Hanoi Izmir Jaipur Kyoto Lagos
Lima Lyon Madrid Malmo Nagoya Oslo Porto Quito Riga Seville Tampere Toledo Utrecht Valencia Vienna
Warsaw Xiamen York Zagreb""".split()
JOBS = """baker pilot nurse farmer teacher painter sailor chemist tailor plumber poet judge doctor
writer gardener architect dentist lawyer mechanic singer""".split()
COLORS = """red blue green yellow purple orange white black brown gray pink silver""".split()
ANIMALS = """cat dog fox owl bear wolf frog duck goat horse tiger whale mouse eagle camel lion""".split()
# Short keys for the tiny-model recall task (Zoology-style small task vocabulary).
SHORT_KEYS = """cat dog cup hat box pen map car bus key egg ice jam kit log mug net oak pot rug
saw tap toy van web yak zip ant bat bee cow elk fig gum hen ink jar owl pig ram""".split()
DIGITS = list("0123456789")
LETTERS = list("abcdefghijklmnopqrstuvwxyz")
