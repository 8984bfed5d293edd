// Command fulfilment is the shop's shipping function: the Lambda the
// dispatcher invokes for ship_order (an AWS target in EFFECTS, not one of
// the pipeline's functions). It ships an order once per operation id
// (package fulfilment). Its record of shipments is kept in
// LOCAL_STATE_DIR, which the local stack sets; without it, in memory.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"example.com/shop/fulfilment"
)

func main() { lambda.Start(fulfilment.New(os.Getenv("LOCAL_STATE_DIR")).Handle) }
