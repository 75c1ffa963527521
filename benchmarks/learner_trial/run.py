import sys, json
sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
import harness
for m in sys.argv[2:]:
    __import__(m)
rows = harness.run()
json.dump(rows, open(sys.argv[1], 'w'), indent=0)
