import sys, time; sys.path.insert(0, "/work/main")
sys.path.insert(0, "tests"); sys.path.insert(0, "tests/integration")
from pathlib import Path
import shutil
shutil.rmtree("/tmp/kd5", ignore_errors=True)
from processor.kafka_local import LocalKafka, broker_answers
import test_kafka_local as t
from kafka_fixtures import create_topic
import schemas
T=time.monotonic()
def mark(x): print(f"{time.monotonic()-T:6.1f} {x}", flush=True)
k=LocalKafka(Path("/tmp/kd5")); k.start(); mark("started")
b=k.bootstrap
create_topic(b,"payroll.batches",2); mark("topic")
v=schemas.encode("payroll.batches", t.BATCH)
t.produce(b,"payroll.batches",b"k",v,[]); mark("produced")
k.stop(); mark("stopped")
print(broker_answers(b, timeout=2)); mark("answers check")
k.start(); mark("started again")
m=t.consume_one(b,"payroll.batches"); mark("consumed")
k.restart(); mark("restarted")
t.produce(b,"payroll.batches",b"k2",v,[]); mark("produced 2")
t._assert_topics_are_not_auto_created(b); mark("autocreate check")
k.stop()
