"""The Spark Structured Streaming pipeline that maintains the stores: the only part of iqgate that imports pyspark.

``session`` (the SparkSession), ``iqlog_source`` (the EventLog as a Python streaming
data source), ``topology`` (declaring stores with DataFrame code), ``materializer``
(foreachBatch: changed rows + the batch's Position into the store writer), ``runtime``
(one streaming query per store, reporting to the StreamsApp's state machine).
"""
