// Command fulfilment is the example shop's shipping function
// (example.com/shop/fulfilment), the ship_order effect's Lambda target.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"example.com/shop/fulfilment"
)

func main() { lambda.Start(fulfilment.New(os.Getenv("LOCAL_STATE_DIR")).Handle) }
